"""`ToolTask`: the base class of a tool-calling task, and its OpenEnv environment.

A subclass declares `tools` (OpenAI function tools), where problems come from (`problems` or
`problem(seed)`), the opening messages (`prompt`), what a call returns (`call`), and how an
answer scores (`score`). An episode: reset deals problem `seed`; each reply is one step: its
calls run in order and their results are the next observation (a tool that raises returns
`error: <type>: <message>` to the policy as the tool's message); a reply without calls, or a
call of `answer_tool`, is the answer, which ends the episode with `score`. A malformed reply
(rlsvc/tools/parser.py) is an invalid answer, counted like any other.

This module imports neither torch, Ray, vLLM nor OpenEnv: the OpenEnv classes are built on
first use, the parser when the codec is.
"""

from __future__ import annotations

import random
import sys
from abc import abstractmethod
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, ClassVar

from rlsvc.envs.lazy import lazy_classes
from rlsvc.task import EnvSpec, Task, TaskError, outcome_rates
from rlsvc.tools.schema import ToolReply


class ToolServerLost(RuntimeError):
    """A call could not reach the tools' server: not the policy's doing, so the episode fails
    (`env_error`, its group left out of the step) instead of the policy reading an error."""


class ToolTask(Task):
    """Implement `prompt`, `call` and `score`; set `tools`, and `problems` or override `problem`."""

    chat = True
    outcomes: tuple[str, ...] = ("correct", "wrong", "invalid", "truncated")
    tools: Sequence[dict[str, Any]] = ()
    """The tools the policy may call, as OpenAI function tools (`rlsvc.tools.schema.function`)."""
    tool_parser: str = "auto"
    """vLLM's tool parser for the model's family: `hermes` (Qwen), `llama3_json` (Llama 3), or
    `auto` (by the tokenizer's vocabulary)."""
    answer_tool: str | None = None
    """A tool whose call is the answer (its `answer` argument is scored); None: the answer is a
    reply without calls."""
    problems: Sequence[Any] = ()
    quick_steps: bool = True
    """Every tool is plain Python taking microseconds (see `EnvSpec.quick_steps`); set False
    when a tool does I/O or runs a subprocess."""

    def problem(self, seed: int) -> Any:
        """Problem `seed` (every episode of a GRPO group gets the same one): a row of `problems`."""
        if not self.problems:
            raise TaskError(f"task {self.name}: no problems (set `problems` or override `problem`)")
        return self.problems[seed % len(self.problems)]

    @abstractmethod
    def prompt(self, problem: Any) -> list[dict[str, str]]:
        """The opening chat messages (the tools are added by the chat template)."""

    @abstractmethod
    def call(self, problem: Any, name: str, arguments: dict[str, Any]) -> str:
        """The result of calling tool `name` (declared, its arguments valid for its schema); an
        exception is returned to the policy as the tool's error message."""

    @abstractmethod
    def score(self, problem: Any, answer: str) -> float:
        """The reward of the final answer."""

    def metrics(self, episodes: list[Any]) -> dict[str, float]:
        """The outcome rates, and how the tools were used: `tool_turns` (turns of tool results
        per episode: every reply but an episode's last made calls that were run) and
        `tool_episode_rate` (the share of episodes with at least one)."""
        n = max(len(episodes), 1)
        turns = [max(len(ep.responses) - 1, 0) for ep in episodes]
        return {**outcome_rates(episodes, self.outcomes), "tool_turns": sum(turns) / n, "tool_episode_rate": sum(t > 0 for t in turns) / n}

    def outcome(self, problem: Any, reward: float) -> str:
        return "correct" if reward >= 1.0 else "wrong"

    def demonstration(self, problem: Any) -> ToolReply | None:
        """A good first reply to `problem` (its calls): what the format warm start
        (`model.warm_start_steps`) teaches, written in the model family's call format. None
        (the default): the task has no warm start."""
        return None

    def final_answer(self, problem: Any) -> str | None:
        """What a good policy answers once its demonstrated calls have returned: with
        `demonstration`, a whole episode for the tool warm start (rlsvc/tools/warm_start.py).
        None (the default): no such warm start."""
        return None

    def warm_start_examples(self, rng: random.Random, n: int) -> list[tuple[Any, Any]] | None:
        """(first observation, `demonstration`) pairs of random problems."""
        problems = [self.problem(rng.randrange(2**31)) for _ in range(n)]
        return [(SimpleNamespace(prompt=self.prompt(p), results=[]), self.demonstration(p)) for p in problems]

    def has(self, hook: str) -> bool:
        """As `Task.has`; the warm start counts once the task has demonstrations."""
        if hook == "warm_start_examples":
            return type(self).demonstration is not ToolTask.demonstration
        return super().has(hook)

    # -- the Task interface ---------------------------------------------------------------------

    def env_spec(self) -> EnvSpec:
        classes = _classes()
        env = type(f"{type(self).__name__}Environment", (classes["ToolEnvironment"],), {"task": self})
        return EnvSpec(
            self.name, env, classes["ToolAction"], classes["ToolObservation"], classes["ToolState"], _payload, quick_steps=self.quick_steps
        )

    def render(self, observation: Any) -> list[dict[str, str]]:
        return observation.prompt  # type: ignore[no-any-return]

    def parse(self, text: str) -> Any | None:
        raise TypeError(f"task {self.name}: a tool-calling task's replies are parsed by its codec (make_codec), which knows the tokenizer")

    def observe(self, observation: Any) -> dict[str, Any]:
        """A transcript keeps the tool results (the opening messages only before the first reply)."""
        results = list(getattr(observation, "results", None) or [])
        return {"results": results} if results else {"prompt": observation.prompt}

    def accepts(self, reply: ToolReply) -> bool:
        """Whether a well-formed reply is a valid action here (default: any); False makes it
        an invalid answer."""
        return True

    def tool_results(self, observation: Any) -> list[dict[str, str]]:
        """The results a reply's calls got, as `tool` messages' `{"name", "content"}`."""
        return list(observation.results)

    def make_codec(self, tokenizer: Any, max_prompt_tokens: int | None = None) -> Any:
        """The codec that prompts with the tools and parses calls (rlsvc/tools/codec.py)."""
        from rlsvc.tools.codec import ToolCodec

        return ToolCodec(self, tokenizer, max_prompt_tokens)

    def run_call(self, problem: Any, name: str, arguments: dict[str, Any]) -> str:
        """`call`, with an exception turned into the error message the policy reads (except
        `ToolServerLost`: the episode then fails, as any environment that raises)."""
        try:
            return str(self.call(problem, name, arguments))
        except ToolServerLost:
            raise
        except Exception as e:  # the tool's failure is the policy's observation, not ours
            return f"error: {type(e).__name__}: {e}"


def _payload(reply: Any) -> dict[str, Any]:
    return reply.payload()  # type: ignore[no-any-return]


def _build_classes() -> dict[str, type]:
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State

    class ToolAction(Action):
        content: str = ""
        calls: list[dict[str, Any]] = []

    class ToolObservation(Observation):
        prompt: list[dict[str, str]]
        results: list[dict[str, str]] = []  # the last reply's calls' results: {"name", "content"}
        outcome: str | None = None  # a field: OpenEnv's serializer drops metadata

    class ToolState(State):
        seed: int | None = None

    class ToolEnvironment(Environment[ToolAction, ToolObservation, ToolState]):
        """Reset deals problem `seed` of `task`; a step runs the reply's calls, or scores its answer."""

        SUPPORTS_CONCURRENT_SESSIONS = True
        task: ClassVar[Any] = None

        def __init__(self) -> None:
            super().__init__()
            self._state, self._problem = ToolState(), None
            self._prompt: list[dict[str, Any]] = []

        def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> ToolObservation:
            self._state, self._problem = ToolState(episode_id=episode_id, seed=seed), self.task.problem(seed or 0)
            self._prompt = self.task.prompt(self._problem)
            return ToolObservation(prompt=self._prompt, done=False, reward=None)

        def step(self, action: ToolAction, timeout_s: float | None = None, **kwargs: Any) -> ToolObservation:
            if self._problem is None:
                raise RuntimeError("call reset before step")
            self._state.step_count += 1
            answer = _answer(action, self.task.answer_tool)
            if answer is not None:
                reward = float(self.task.score(self._problem, answer))
                return ToolObservation(prompt=self._prompt, done=True, reward=reward, outcome=self.task.outcome(self._problem, reward))
            results = [{"name": c["name"], "content": self.task.run_call(self._problem, c["name"], c["arguments"])} for c in action.calls]
            return ToolObservation(prompt=self._prompt, results=results, done=False, reward=None)

        @property
        def state(self) -> ToolState:
            return self._state

    return {c.__name__: c for c in (ToolAction, ToolObservation, ToolState, ToolEnvironment)}


def _answer(action: Any, answer_tool: str | None) -> str | None:
    """The answer a reply gives, if it gives one: the `answer` argument of a call of
    `answer_tool`, else (without such a tool) a reply without calls; None: it makes calls."""
    if answer_tool is not None:
        submitted = [c for c in action.calls if c["name"] == answer_tool]
        return str(submitted[0]["arguments"].get("answer", "")) if submitted else None
    return None if action.calls else str(action.content)


_NAMES = ("ToolAction", "ToolObservation", "ToolState", "ToolEnvironment")
__getattr__ = lazy_classes(__name__, _NAMES, _build_classes)


def _classes() -> dict[str, type]:
    module = sys.modules[__name__]
    return {name: getattr(module, name) for name in _NAMES}
