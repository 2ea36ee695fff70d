"""Questions with one right answer, read from a JSONL file (`question`, `answer`, optional `split`):
the policy reads the question and answers once; the reward is 1 for an exact match (after
stripping spaces), else 0. The most common RL post-training pattern (math, QA), as an rlsvc task.

Select it with `python -m rlsvc.train env.task=rlsvc_qa.task:QATask` (import path) or, once this
package is installed (`pip install -e examples/qa_task`), with `env.task=qa` (its entry point in
group `rlsvc.tasks`). Options: `env.options.path=...` (default: the shipped problems),
`env.options.answers=[...]` (a fixed answer set, for constrained decoding and validation).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rlsvc.envs.openenv_pool import EnvSpec
from rlsvc.task import GreedyChooser, Task

PROBLEMS = Path(__file__).with_name("problems.jsonl")


def load_problems(path: str | Path, split: str) -> list[dict[str, str]]:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("split", "train") == split]


class QATask(Task):
    name = "qa"
    outcomes = ("correct", "wrong", "invalid", "truncated")

    def __init__(self, path: str = str(PROBLEMS), answers: list[str] | None = None, validate_split: str = "val") -> None:
        """`path`: the JSONL problems; `answers`: the fixed answer set (default the ten digits);
        `validate_split`: the questions `validate` asks (`val`, held out; `train`, to see what
        the policy learned)."""
        if not Path(path).is_file():
            raise FileNotFoundError(f"env.options.path: no problem file at {path}")
        self.path = str(path)
        self.fixed_answers = answers if answers is not None else [str(d) for d in range(10)]
        self.validate_split = validate_split

    def env_spec(self) -> EnvSpec:
        classes = _openenv_classes()
        problems = load_problems(self.path, "train")
        env = type("QAEnvironment", (classes["QAEnvironment"],), {"problems": problems})
        return EnvSpec("qa", env, classes["QAAction"], classes["QAObservation"], classes["QAState"], lambda a: {"answer": a})

    def render(self, observation: Any) -> str:
        return observation.question

    def parse(self, text: str) -> str | None:
        answer = text.strip()
        return answer or None  # an empty answer is not an answer

    def answers(self) -> list[str] | None:
        return list(self.fixed_answers) or None

    def prompt_key(self, observation: Any) -> str:
        return observation.question  # few distinct questions: tokenise each once

    def validate(self, choose: GreedyChooser, episodes: int, seed: int) -> float:
        """Greedy accuracy on the `validate_split` questions, choosing among the answers."""
        val = load_problems(self.path, self.validate_split)
        picks = choose([SimpleNamespace(question=r["question"]) for r in val], self.fixed_answers)
        return sum(self.fixed_answers[i] == r["answer"] for i, r in zip(picks, val)) / max(len(val), 1)


def _openenv_classes() -> dict[str, type]:
    """OpenEnv's types, imported when the environment is served (the import takes seconds)."""
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State

    class QAAction(Action):
        answer: str

    class QAObservation(Observation):
        question: str
        outcome: str | None = None  # a field: OpenEnv's serializer drops metadata

    class QAState(State):
        question: str | None = None

    class QAEnvironment(Environment[QAAction, QAObservation, QAState]):
        SUPPORTS_CONCURRENT_SESSIONS = True
        problems: list[dict[str, str]] = []

        def __init__(self) -> None:
            super().__init__()
            self._problem: dict[str, str] | None = None
            self._state = QAState()

        def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> QAObservation:
            self._problem = self.problems[(seed or 0) % len(self.problems)]
            self._state = QAState(episode_id=episode_id, question=self._problem["question"])
            return QAObservation(question=self._problem["question"], done=False, reward=None)

        def step(self, action: QAAction, timeout_s: float | None = None, **kwargs: Any) -> QAObservation:
            if self._problem is None:
                raise RuntimeError("call reset before step")
            correct = action.answer.strip() == self._problem["answer"].strip()
            self._state.step_count += 1
            return QAObservation(
                question=self._problem["question"], done=True, reward=1.0 if correct else 0.0, outcome="correct" if correct else "wrong"
            )

        @property
        def state(self) -> QAState:
            return self._state

    return {"QAAction": QAAction, "QAObservation": QAObservation, "QAState": QAState, "QAEnvironment": QAEnvironment}
