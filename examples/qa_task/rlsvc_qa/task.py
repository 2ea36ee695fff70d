"""Questions with one right answer, read from a JSONL file (`question`, `answer`, optional `split`):
the policy reads the question and answers once; the reward is 1 for an exact match (after
stripping spaces), else 0. The most common RL post-training pattern (math, QA), as an rlsvc task
on the single-turn base (`rlsvc.single_turn.SingleTurnTask`), which builds its OpenEnv environment.

Select it with `python -m rlsvc.train env.task=rlsvc_qa.task:QATask` (import path) or, once this
package is installed (`pip install -e examples/qa_task`), with `env.task=qa` (its entry point in
group `rlsvc.tasks`). Options: `env.options.path=...` (default: the shipped problems),
`env.options.answers=[...]` (a fixed answer set, for constrained decoding and validation),
`env.options.validate_split=...` (the questions validation and the final evaluation ask).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rlsvc.single_turn import SingleTurnTask
from rlsvc.task import GreedyChooser

PROBLEMS = Path(__file__).with_name("problems.jsonl")


def load_problems(path: str | Path, split: str) -> list[dict[str, str]]:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("split", "train") == split]


class QATask(SingleTurnTask):
    name = "qa"

    def __init__(self, path: str = str(PROBLEMS), answers: list[str] | None = None, validate_split: str = "val") -> None:
        """`answers`: the fixed answer set (default the ten digits); `validate_split`: the
        questions `validate` and `evaluate` ask (`val`, held out; `train`, what was learned)."""
        if not Path(path).is_file():
            raise FileNotFoundError(f"env.options.path: no problem file at {path}")
        self.problems, self.val = load_problems(path, "train"), load_problems(path, validate_split)
        self.fixed_answers = answers if answers is not None else [str(d) for d in range(10)]

    def prompt(self, problem: dict[str, str]) -> str:
        return problem["question"]

    def score(self, problem: dict[str, str], answer: str) -> float:
        return float(answer == problem["answer"].strip())

    def parse(self, text: str) -> str | None:
        return text.strip() or None  # an empty answer is not an answer

    def answers(self) -> list[str] | None:
        return list(self.fixed_answers) or None

    def prompt_key(self, observation: Any) -> str:
        return observation.prompt  # few distinct questions: tokenise each once

    def held_out(self, episodes: int, seed: int) -> list[dict[str, str]]:
        return self.val[:episodes]

    def validate(self, choose: GreedyChooser, episodes: int, seed: int) -> float:
        """Greedy accuracy on the `validate_split` questions, choosing among the answers."""
        picks = choose([SimpleNamespace(prompt=self.prompt(r)) for r in self.val], self.fixed_answers)
        return sum(self.fixed_answers[i] == r["answer"] for i, r in zip(picks, self.val)) / max(len(self.val), 1)
