"""The task of the representative comparison with TRL (benchmarks/vs_trl_representative.py): an
arithmetic word problem as a chat message (`rlsvc.problems.arithmetic_problem`, seeded), answered
in free text of several tokens; one turn.

The reward (`score`, the same function on both sides) is 1 for the exact number and a small
format credit, 0.1, for an answer that holds some other number: a random model's answers hold a
digit now and then, so a group's rewards differ and GRPO has something to learn from the first
step, as it would with a pretrained model and an accuracy reward. A plug-in task on rlsvc's
single-turn base (`rlsvc.single_turn.SingleTurnTask`), selected with
`env.task=benchmarks.answer_task:ArithmeticAnswerTask`.
"""

from __future__ import annotations

from rlsvc.problems.arithmetic import ArithmeticProblem, arithmetic_problem, parse_number
from rlsvc.single_turn import SingleTurnTask
from rlsvc.task import Prompt

FORMAT_CREDIT = 0.1


def score(text: str, answer: int) -> float:
    """1 for the exact answer (the last number in the text), FORMAT_CREDIT for another number, else 0."""
    number = parse_number(text)
    return 0.0 if number is None else 1.0 if number == answer else FORMAT_CREDIT


def messages(seed: int) -> list[dict[str, str]]:
    """The chat prompt of problem `seed`."""
    return [{"role": "user", "content": arithmetic_problem(seed).prompt}]


class ArithmeticAnswerTask(SingleTurnTask):
    name = "arithmetic_answer"
    outcomes = ("correct", "number", "no_number", "truncated")
    chat = True

    def problem(self, seed: int) -> ArithmeticProblem:
        return arithmetic_problem(seed)

    def prompt(self, problem: ArithmeticProblem) -> Prompt:
        return messages(problem.seed)

    def score(self, problem: ArithmeticProblem, answer: str) -> float:
        return score(answer, problem.answer)  # the module's function: TRL's side is scored with it too

    def outcome(self, problem: ArithmeticProblem, reward: float) -> str:
        return "correct" if reward == 1.0 else "number" if reward else "no_number"
