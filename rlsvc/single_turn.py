"""The commonest task shape as a base class: a problem, a prompt, a score (one turn).

A subclass says where problems come from (`problems`, rows of a dataset; or `problem(seed)`,
generated), how one reads as a prompt (`prompt`: text, or chat messages with a system prompt),
and how a completion scores (`score`). The base builds the rest of a `Task`: the OpenEnv
environment (reset deals problem `seed`, the one step scores the answer), its Action /
Observation / State types and the `EnvSpec`; `render`, `parse`, the outcomes; and, once the
task names its held-out problems (`held_out`), an evaluation of the saved policy (`evaluate`:
greedy completions, scored). docs/tasks.md has an example of 20 lines.

This module imports neither torch, Ray nor OpenEnv: the OpenEnv classes are built on first use.
"""

from __future__ import annotations

import sys
from abc import abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from rlsvc.envs.lazy import lazy_classes
from rlsvc.task import EnvSpec, Prompt, Task, TaskError


def chat(user: str, system: str | None = None) -> list[dict[str, str]]:
    """A chat prompt: the system message (when given), then the user's."""
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]


class SingleTurnTask(Task):
    """A task of one decision: problem `seed` -> `prompt` -> the policy's completion -> `score`.
    Implement `prompt` and `score`, and either set `problems` or override `problem`."""

    outcomes: tuple[str, ...] = ("correct", "wrong", "invalid", "truncated")
    problems: Sequence[Any] = ()
    """The problems (e.g. a dataset's rows); reset with seed s deals `problems[s % len]`."""
    quick_steps: bool = True
    """`score` is plain Python taking microseconds (see `EnvSpec.quick_steps`); set False when it
    does I/O or runs a subprocess."""

    def problem(self, seed: int) -> Any:
        """Problem `seed` (every episode of a GRPO group gets the same seed). Default: a row of
        `problems`; override it for generated problems."""
        if not self.problems:
            raise TaskError(f"task {self.name}: no problems (set `problems` or override `problem`)")
        return self.problems[seed % len(self.problems)]

    @abstractmethod
    def prompt(self, problem: Any) -> Prompt:
        """What the policy reads: text, or chat messages (`chat(user, system)`; set `chat = True`)."""

    @abstractmethod
    def score(self, problem: Any, answer: str) -> float:
        """The reward of `answer` (what `parse` returned: the completion text by default)."""

    def outcome(self, problem: Any, reward: float) -> str:
        """The episode's outcome (an entry of `outcomes`): `correct` for a reward of 1 or more."""
        return "correct" if reward >= 1.0 else "wrong"

    def held_out(self, episodes: int, seed: int) -> Sequence[Any] | None:
        """Problems kept out of training for `evaluate` (at most `episodes`; `seed` may pick
        them). None (the default): the task has no evaluation of its saved policy."""
        return None

    # -- the Task interface, done once here --------------------------------------------------

    def env_spec(self) -> EnvSpec:
        env = type(f"{type(self).__name__}Environment", (_classes()["SingleTurnEnvironment"],), {"task": self})
        action, obs, state = (_classes()[n] for n in ("SingleTurnAction", "SingleTurnObservation", "SingleTurnState"))
        return EnvSpec(self.name, env, action, obs, state, lambda a: {"answer": str(a)}, quick_steps=self.quick_steps)

    def render(self, observation: Any) -> Prompt:
        return observation.prompt  # type: ignore[no-any-return]

    def parse(self, text: str) -> Any | None:
        """The answer `score` gets; None marks the completion invalid. Default: the text as is."""
        return text

    def has(self, hook: str) -> bool:
        """As `Task.has`; `evaluate` counts once the task names its held-out problems."""
        if hook == "evaluate":  # the generic evaluation needs problems held out of training
            own = type(self).evaluate is not SingleTurnTask.evaluate
            return own or type(self).held_out is not SingleTurnTask.held_out
        return super().has(hook)

    def evaluate(self, checkpoint: Path, episodes: int, seed: int) -> dict[str, float] | None:
        """The saved policy's greedy completions of the `held_out` problems, scored: the mean
        reward and the rate of each outcome (a completion `parse` refuses scores 0, `invalid`)."""
        from rlsvc.saved_policy import SavedPolicy

        problems = list(self.held_out(episodes, seed) or [])[:episodes]
        if not problems:
            return None
        completions = SavedPolicy.load(checkpoint).complete([self.prompt(p) for p in problems])
        answers = [self.parse(c) for c in completions]
        rewards = [0.0 if a is None else float(self.score(p, a)) for p, a in zip(problems, answers)]
        outcomes = ["invalid" if a is None else self.outcome(p, r) for p, a, r in zip(problems, answers, rewards)]
        n = len(problems)
        return {"episodes": n, "mean_return": sum(rewards) / n, **{f"{o}_rate": outcomes.count(o) / n for o in self.outcomes}}


def _build_classes() -> dict[str, type]:
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State

    class SingleTurnAction(Action):
        answer: str

    class SingleTurnObservation(Observation):
        prompt: str | list[dict[str, str]]
        outcome: str | None = None  # a field: OpenEnv's serializer drops metadata

    class SingleTurnState(State):
        seed: int | None = None

    class SingleTurnEnvironment(Environment[SingleTurnAction, SingleTurnObservation, SingleTurnState]):
        """Reset deals problem `seed` of `task`; the one step scores the answer and ends the episode."""

        SUPPORTS_CONCURRENT_SESSIONS = True
        task: ClassVar[Any] = None

        def __init__(self) -> None:
            super().__init__()
            self._state, self._problem, self._dealt = SingleTurnState(), None, False

        def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> SingleTurnObservation:
            self._state, self._problem = SingleTurnState(episode_id=episode_id, seed=seed), self.task.problem(seed or 0)
            self._dealt = True
            return SingleTurnObservation(prompt=self.task.prompt(self._problem), done=False, reward=None)

        def step(self, action: SingleTurnAction, timeout_s: float | None = None, **kwargs: Any) -> SingleTurnObservation:
            if not self._dealt:
                raise RuntimeError("call reset before step")
            reward = float(self.task.score(self._problem, action.answer))
            self._state.step_count += 1
            prompt = self.task.prompt(self._problem)
            return SingleTurnObservation(prompt=prompt, done=True, reward=reward, outcome=self.task.outcome(self._problem, reward))

        @property
        def state(self) -> SingleTurnState:
            return self._state

    return {c.__name__: c for c in (SingleTurnAction, SingleTurnObservation, SingleTurnState, SingleTurnEnvironment)}


_NAMES = ("SingleTurnAction", "SingleTurnObservation", "SingleTurnState", "SingleTurnEnvironment")
__getattr__ = lazy_classes(__name__, _NAMES, _build_classes)


def _classes() -> dict[str, type]:
    module = sys.modules[__name__]
    return {name: getattr(module, name) for name in _NAMES}
