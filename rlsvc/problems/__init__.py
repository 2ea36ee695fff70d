"""The code environment's problem sets and scorer: shipped programming problems with hidden unit
tests (`programming.jsonl`, scored by `programming.py`), and a seeded generator of arithmetic
word problems with numeric answers. `python -m rlsvc.problems score` scores one submission."""

from rlsvc.problems.arithmetic import ArithmeticProblem, arithmetic_problem, parse_number
from rlsvc.problems.programming import ProgrammingProblem, load_problems, score_output, unit_test_program

__all__ = [
    "ArithmeticProblem",
    "ProgrammingProblem",
    "arithmetic_problem",
    "load_problems",
    "parse_number",
    "score_output",
    "unit_test_program",
]
