"""The shipped tasks are sound: every programming problem's hidden tests pass on a reference
solution and fail on a wrong one when run in the sandbox; return values are compared with their
types; word problems are seeded and right. Submissions that try to forge their score:
tests/unit/test_scoring_forgery.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rlsvc.problems import arithmetic_problem, load_problems, parse_number, score_output, unit_test_program
from rlsvc.problems.programming import Score, same
from rlsvc.sandbox import LocalSandbox

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from reference_solutions import SOLUTIONS  # noqa: E402


def test_at_least_50_problems_each_with_a_reference_solution():
    problems = load_problems()
    assert len(problems) >= 50 and len({p.id for p in problems}) == len(problems)
    assert {p.id for p in problems} == set(SOLUTIONS)
    assert all(len(p.tests) >= 2 and p.entry_point in p.prompt for p in problems)


@pytest.fixture(scope="module")
def box():
    return LocalSandbox()


def test_reference_solutions_pass_every_hidden_test(box):
    problems = load_problems()
    failures = []
    for p in problems:
        program, nonce = unit_test_program(p, SOLUTIONS[p.id])
        r = box.run(program, timeout_s=10)
        score = score_output(r.stdout, nonce, p)
        if score.fraction != 1.0:
            failures.append((p.id, score, r.stderr[-300:]))
    assert failures == []


def test_wrong_and_broken_solutions_score_partially_or_zero(box):
    problem = {p.id: p for p in load_problems()}["is_prime"]
    program, nonce = unit_test_program(problem, "def is_prime(n):\n    return n == 2 or n == 97")
    assert score_output(box.run(program, 10).stdout, nonce, problem) == Score(5, 6, None)  # fails is_prime(13)
    program, nonce = unit_test_program(problem, "def is_prime(n)\n    return True")
    score = score_output(box.run(program, 10).stdout, nonce, problem)
    assert score.fraction == 0.0 and score.error.startswith("SyntaxError")
    program, nonce = unit_test_program(problem, "while True:\n    pass")
    assert score_output(box.run(program, 2).stdout, nonce, problem) == Score(
        0, 6, "no test result (the run was killed, timed out or exited early)"
    )


def test_return_values_are_compared_with_their_types():
    assert same(3.0, 3) and same(98.6 + 1e-12, 98.6, tol=1e-9) and not same(98.7, 98.6, tol=1e-9)
    assert not same(1, True) and not same(True, 1) and not same(0, None) and same(None, None)
    assert not same([0, 1], (0, 1)) and same((0, 1), (0, 1)) and not same(float("nan"), 1.0)
    assert same({1: "a"}, {1: "a"}) and not same({"1": "a"}, {1: "a"}) and same({2, 1}, {1, 2})
    assert not same([[1, True]], [[1, 1]]) and same([[1, 2.0]], [[1, 2]])


def test_word_problems_are_seeded_and_their_answers_right():
    assert arithmetic_problem(7) == arithmetic_problem(7)
    assert len({arithmetic_problem(s).prompt for s in range(200)}) > 150
    for seed in range(300):
        p = arithmetic_problem(seed)
        assert isinstance(p.answer, int) and p.answer >= 0 and str(p.answer) not in ("",)
    p = arithmetic_problem(0)
    assert parse_number(f"ANSWER: {p.answer}") == p.answer
    assert parse_number("it is 1,234 apples") == 1234 and parse_number("none") is None and parse_number("-3.5") == -3.5
