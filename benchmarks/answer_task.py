"""The task of the representative comparison with TRL (benchmarks/vs_trl_representative.py): an
arithmetic word problem as a chat message (`rlsvc.problems.arithmetic_problem`, seeded), answered
in free text of several tokens; one turn.

The reward (`score`, the same function on both sides) is 1 for the exact number and a small
format credit, 0.1, for an answer that holds some other number: a random model's answers hold a
digit now and then, so a group's rewards differ and GRPO has something to learn from the first
step, as it would with a pretrained model and an accuracy reward. A plug-in task written
against rlsvc's public interface (`rlsvc.task.Task`), selected with
`env.task=benchmarks.answer_task:ArithmeticAnswerTask`.
"""

from __future__ import annotations

from typing import Any

from rlsvc.envs.openenv_pool import EnvSpec
from rlsvc.problems.arithmetic import arithmetic_problem, parse_number
from rlsvc.task import Prompt, Task

FORMAT_CREDIT = 0.1


def score(text: str, answer: int) -> float:
    """1 for the exact answer (the last number in the text), FORMAT_CREDIT for another number, else 0."""
    number = parse_number(text)
    return 0.0 if number is None else 1.0 if number == answer else FORMAT_CREDIT


def messages(seed: int) -> list[dict[str, str]]:
    """The chat prompt of problem `seed`."""
    return [{"role": "user", "content": arithmetic_problem(seed).prompt}]


class ArithmeticAnswerTask(Task):
    name = "arithmetic_answer"
    outcomes = ("correct", "number", "no_number", "truncated")
    chat = True

    def env_spec(self) -> EnvSpec:
        classes = _openenv_classes()
        return EnvSpec(
            "arithmetic_answer",
            classes["Environment"],
            classes["Action"],
            classes["Observation"],
            classes["State"],
            lambda text: {"text": text},
            quick_steps=True,  # plain Python: the env actors step it in their own thread
        )

    def render(self, observation: Any) -> Prompt:
        return [{"role": "user", "content": observation.question}]

    def parse(self, text: str) -> str | None:
        return text  # any text is an answer; the reward judges it


def _openenv_classes() -> dict[str, type]:
    """OpenEnv's types, imported where the environment is served (the import takes seconds)."""
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State

    class AnswerAction(Action):
        text: str

    class AnswerObservation(Observation):
        question: str
        outcome: str | None = None  # a field: OpenEnv's serializer drops metadata

    class AnswerState(State):
        seed: int | None = None

    class AnswerEnvironment(Environment[AnswerAction, AnswerObservation, AnswerState]):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self._state = AnswerState()
            self._problem = arithmetic_problem(0)

        def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> AnswerObservation:
            self._problem = arithmetic_problem(seed or 0)
            self._state = AnswerState(episode_id=episode_id, seed=seed)
            return AnswerObservation(question=self._problem.prompt, done=False, reward=None)

        def step(self, action: AnswerAction, timeout_s: float | None = None, **kwargs: Any) -> AnswerObservation:
            reward = score(action.text, self._problem.answer)
            outcome = "correct" if reward == 1.0 else "number" if reward else "no_number"
            self._state.step_count += 1
            return AnswerObservation(question=self._problem.prompt, done=True, reward=reward, outcome=outcome)

        @property
        def state(self) -> AnswerState:
            return self._state

    return {"Action": AnswerAction, "Observation": AnswerObservation, "State": AnswerState, "Environment": AnswerEnvironment}
