"""A new single-turn task, written from docs/tasks.md alone: the last digit of a sum ("17+25=" ->
"2"), from rows of a dataset (here built in code); exact match scores 1. Train it with
`env.task=last_digit_task:LastDigitTask` and this folder on PYTHONPATH (tests/e2e/test_plugin_task.py)."""

from __future__ import annotations

import random
from typing import Any

from rlsvc.single_turn import SingleTurnTask


class LastDigitTask(SingleTurnTask):
    name = "last_digit"

    def __init__(self, rows: int = 200, held_out: int = 40, seed: int = 0) -> None:
        rng = random.Random(seed)
        pairs = [(rng.randint(0, 99), rng.randint(0, 99)) for _ in range(rows)]
        data = [{"question": f"{a}+{b}=", "answer": str((a + b) % 10)} for a, b in pairs]
        self.problems, self.val = data[held_out:], data[:held_out]

    def prompt(self, problem: dict[str, str]) -> str:
        return problem["question"]

    def score(self, problem: dict[str, str], answer: str) -> float:
        return float(answer.strip() == problem["answer"])

    def answers(self) -> list[str]:
        return [str(d) for d in range(10)]  # constrained decoding: one digit

    def held_out(self, episodes: int, seed: int) -> Any:
        return self.val[:episodes]
