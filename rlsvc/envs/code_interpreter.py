"""Tool-use episodes: the policy may run code, read what it printed, and then answer.

`CodeEpisode` is the plain episode (testable without a server); `CodeInterpreterEnvironment` is
the OpenEnv environment over it, served like BlackJack on env actors (one per WebSocket session).
An episode opens one execution session on its backend and runs every `code` action in it, so
state carries across turns; an `answer` action ends it:
- programming problems: the answer is a solution; the reward is the fraction of the problem's
  hidden unit tests it passes: a fresh session runs it and returns what the entry point returned
  for each test's arguments, and this process compares those values with the expected ones
  (rlsvc/problems/programming.py: the expected values never reach the sandbox);
- arithmetic word problems: the answer is a number; the reward is 1 when it is exact.
Every executed cell that raised costs `error_penalty`. After `max_turns` actions without an
answer the episode ends with what it has (0 and the penalties). When the backend itself fails
(the remote service is down past its retry cap), the episode ends with `failed=True`: the trainer
leaves its whole group out rather than learn from a score the policy did not earn. Nothing a
submission does can cause that: a run that crashes, hangs, prints garbage or exits early scores 0.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from rlsvc.envs.lazy import lazy_classes
from rlsvc.problems import arithmetic_problem, load_problems, parse_number, score_output, unit_test_program
from rlsvc.problems.programming import ProgrammingProblem, Score
from rlsvc.sandbox.local import LocalSandbox, LocalSession, SandboxLimits, SandboxResult
from rlsvc.sandbox.text import valid_utf8

TaskKind = Literal["programming", "arithmetic", "mixed"]
ActionKind = Literal["code", "answer"]


@dataclass(frozen=True)
class CodeEnvSettings:
    backend: Literal["local", "together"] = "local"
    tasks: TaskKind = "mixed"
    max_turns: int = 3
    error_penalty: float = 0.1
    exec_timeout_s: float = 5.0
    memory_mb: int = 512
    disk_mb: int = 64
    together_base_url: str | None = None
    attempts: int = 5


class Session(Protocol):
    def execute(self, code: str) -> SandboxResult: ...

    def close(self) -> None: ...


class Backend(Protocol):
    def open_session(self) -> Session: ...

    def close(self) -> None: ...


class LocalBackend:
    def __init__(self, s: CodeEnvSettings) -> None:
        self.box = LocalSandbox(SandboxLimits(memory_mb=s.memory_mb, cpu_s=max(1, int(s.exec_timeout_s) + 1), disk_mb=s.disk_mb))
        self.timeout_s = s.exec_timeout_s

    def open_session(self) -> Session:
        return LocalSession(self.box, self.timeout_s)

    def close(self) -> None:
        pass


class TogetherSession:
    def __init__(self, client: Any) -> None:
        self.client, self.session_id = client, None

    def execute(self, code: str) -> SandboxResult:
        result, self.session_id = self.client.execute(code, self.session_id)
        return result

    def close(self) -> None:
        self.session_id = None  # TCI sessions expire on their own (60 minutes)


class TogetherBackend:
    def __init__(self, s: CodeEnvSettings) -> None:
        from rlsvc.sandbox.together import RetryPolicy, TogetherInterpreter

        self.client = TogetherInterpreter(
            base_url=s.together_base_url, timeout_s=s.exec_timeout_s + 25, retry=RetryPolicy(attempts=s.attempts)
        )

    def open_session(self) -> Session:
        return TogetherSession(self.client)

    def close(self) -> None:
        self.client.close()


def make_backend(s: CodeEnvSettings) -> Backend:
    return LocalBackend(s) if s.backend == "local" else TogetherBackend(s)


def split_error(error: str | None) -> tuple[str | None, str | None]:
    """'ValueError: bad' -> ('ValueError', 'bad')."""
    if not error:
        return None, None
    kind, sep, message = error.partition(": ")
    return (kind, message) if sep and kind.replace(".", "").isidentifier() else ("Error", error)


def score_solution(backend: Backend, problem: ProgrammingProblem, solution: str) -> tuple[Score, SandboxResult]:
    """Run `solution` against the problem's hidden tests in a fresh session of `backend` (the
    episode's own cells do not count) and score it (rlsvc/problems/programming.py). A backend that
    fails raises: that is an infrastructure fault, not the solution's score."""
    program, nonce = unit_test_program(problem, solution)
    session = backend.open_session()
    try:
        result = session.execute(program)
    finally:
        session.close()
    return score_output(result.stdout, nonce, problem), result


@dataclass
class Task:
    kind: Literal["programming", "arithmetic"]
    prompt: str
    problem: Any = None
    answer: float | None = None


def pick_task(kinds: TaskKind, seed: int) -> Task:
    rng = random.Random(seed)
    kind = rng.choice(["programming", "arithmetic"]) if kinds == "mixed" else kinds
    if kind == "programming":
        problems = load_problems()
        p = problems[rng.randrange(len(problems))]
        return Task("programming", p.prompt, problem=p)
    a = arithmetic_problem(seed)
    return Task("arithmetic", a.prompt, answer=float(a.answer))


class CodeEpisode:
    """One episode; `reset` and `step` return observation dicts (the OpenEnv fields)."""

    def __init__(self, settings: CodeEnvSettings, backend: Backend) -> None:
        self.s, self.backend = settings, backend
        self.task: Task | None = None
        self.session: Session | None = None
        self.turn = 0
        self.errors = 0
        self.done = False

    def reset(self, seed: int | None) -> dict[str, Any]:
        self.close_session()
        self.task = pick_task(self.s.tasks, 0 if seed is None else seed)
        self.session = self.backend.open_session()
        self.turn, self.errors, self.done = 0, 0, False
        return self._obs(None, reward=None)

    def step(self, kind: ActionKind, content: str) -> dict[str, Any]:
        if self.task is None or self.done:
            raise RuntimeError("reset before stepping (the episode is over or not started)")
        self.turn += 1
        try:
            if kind == "answer":
                return self._finish(*self._score(content))
            result = self.session.execute(content)  # type: ignore[union-attr]
        except Exception as e:  # the backend failed past its retries: this episode cannot be scored
            self.done = True
            self.close_session()
            failure = valid_utf8(f"{type(e).__name__}: {e}"[:300])[0]  # a remote service's text, too, must encode
            return self._obs(None, reward=0.0, outcome="failed", failed=True, failure=failure)
        if result.error:
            self.errors += 1
        if self.turn >= self.s.max_turns:
            self.done = True
            self.close_session()
            return self._obs(result, reward=-self.s.error_penalty * self.errors, outcome="turn_limit")
        return self._obs(result, reward=0.0)

    def _score(self, content: str) -> tuple[float, SandboxResult | None, str]:
        task = self.task
        assert task is not None
        if task.kind == "arithmetic":
            value = parse_number(content)
            solved = value is not None and task.answer is not None and abs(value - task.answer) < 1e-9
            return (1.0 if solved else 0.0), None, "solved" if solved else "wrong"
        score, result = score_solution(self.backend, task.problem, content)
        if score.error:
            self.errors += 1
            result = SandboxResult(
                result.stdout, result.stderr, 1, result.timed_out, score.error, result.elapsed_s, replaced=result.replaced
            )
        return score.fraction, result, score.outcome

    def _finish(self, score: float, result: SandboxResult | None, outcome: str) -> dict[str, Any]:
        self.done = True
        self.close_session()
        obs = self._obs(result, reward=score - self.s.error_penalty * self.errors, outcome=outcome)
        obs["score"] = score
        return obs

    def _obs(
        self, r: SandboxResult | None, reward: float | None, outcome: str | None = None, failed: bool = False, failure: str | None = None
    ) -> dict[str, Any]:
        assert self.task is not None
        error_type, error_message = split_error(r.error if r else None)
        return {
            "task": self.task.kind,
            "prompt": self.task.prompt,
            "turn": self.turn,
            "max_turns": self.s.max_turns,
            "stdout": r.stdout[-2000:] if r else "",
            "stderr": r.stderr[-2000:] if r else "",
            "error_type": error_type,
            "error_message": error_message,
            "exit_code": r.exit_code if r else None,
            "timed_out": bool(r and r.timed_out),
            "elapsed_s": r.elapsed_s if r else 0.0,
            "replaced": r.replaced if r else 0,
            "outcome": outcome,
            "failed": failed,
            "failure": failure,
            "errors": self.errors,
            "score": None,
            "done": self.done,
            "reward": reward,
        }

    def close_session(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None


# ---------------------------------------------------------------------------------------------
# OpenEnv classes, built lazily (`import openenv.core` takes seconds; see rlsvc/envs/blackjack.py)
# ---------------------------------------------------------------------------------------------

_OPENENV_NAMES = ("CodeAction", "CodeObservation", "CodeState", "CodeInterpreterEnvironment")


def _build_openenv_classes() -> dict[str, type]:
    from openenv.core.env_server.types import Action, Observation, State

    class CodeAction(Action):
        """Run `content` as code in the episode's session, or submit it as the answer."""

        kind: ActionKind
        content: str

    class CodeObservation(Observation):
        """The task, and what the last action produced (fields, not metadata: OpenEnv's
        serializer drops metadata)."""

        task: str
        prompt: str
        turn: int
        max_turns: int
        stdout: str = ""
        stderr: str = ""
        error_type: str | None = None
        error_message: str | None = None
        exit_code: int | None = None
        timed_out: bool = False
        elapsed_s: float = 0.0
        replaced: int = 0
        """Characters of the run's text that were not valid UTF-8, replaced with U+FFFD."""
        outcome: str | None = None
        failed: bool = False
        failure: str | None = None
        errors: int = 0
        score: float | None = None

    class CodeState(State):
        seed: int | None = None
        task: str | None = None
        turn: int = 0

    environment = _environment_class(CodeAction, CodeObservation, CodeState)
    return {"CodeAction": CodeAction, "CodeObservation": CodeObservation, "CodeState": CodeState, "CodeInterpreterEnvironment": environment}


def _environment_class(action_cls: Any, observation_cls: Any, state_cls: Any) -> type:
    """OpenEnv's `Environment` over `CodeEpisode`, for the action, observation and state types."""
    import asyncio

    from openenv.core.env_server.interfaces import Environment

    class CodeInterpreterEnvironment(Environment):  # type: ignore[type-arg]
        """OpenEnv environment over `CodeEpisode`; one instance per WebSocket session."""

        SUPPORTS_CONCURRENT_SESSIONS = True
        settings = CodeEnvSettings()  # the serving pool sets its own (see `configured`)
        _backend: Backend | None = None

        @classmethod
        def configured(cls, settings: CodeEnvSettings) -> type:
            """A subclass bound to `settings`, with one backend shared by its sessions."""
            return type(cls.__name__, (cls,), {"settings": settings, "_backend": make_backend(settings)})

        def __init__(self) -> None:
            super().__init__()
            backend = type(self)._backend or make_backend(self.settings)
            self.episode = CodeEpisode(self.settings, backend)
            self._state = state_cls()

        def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Any:
            obs = self.episode.reset(seed)
            self._state = state_cls(episode_id=episode_id, seed=seed, task=obs["task"])
            return observation_cls(**obs)

        def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
            obs = self.episode.step(action.kind, action.content)
            self._state.step_count += 1
            self._state.turn = obs["turn"]
            return observation_cls(**obs)

        # Code runs take tens of milliseconds to seconds in a subprocess or a remote call: run
        # them on worker threads so the server's other sessions keep going meanwhile.
        async def reset_async(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Any:
            return await asyncio.to_thread(self.reset, seed, episode_id)

        async def step_async(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
            return await asyncio.to_thread(self.step, action)

        @property
        def state(self) -> Any:
            return self._state

        def close(self) -> None:
            self.episode.close_session()

    return CodeInterpreterEnvironment


__getattr__ = lazy_classes(__name__, _OPENENV_NAMES, _build_openenv_classes)
