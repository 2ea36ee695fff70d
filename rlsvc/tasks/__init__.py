"""Tasks scored by running code: shipped programming problems with hidden unit tests, and a
seeded generator of arithmetic word problems with numeric answers."""

from rlsvc.tasks.arithmetic import ArithmeticProblem, arithmetic_problem, parse_number
from rlsvc.tasks.programming import ProgrammingProblem, load_problems, score_output, unit_test_program

__all__ = [
    "ArithmeticProblem",
    "ProgrammingProblem",
    "arithmetic_problem",
    "load_problems",
    "parse_number",
    "score_output",
    "unit_test_program",
]
