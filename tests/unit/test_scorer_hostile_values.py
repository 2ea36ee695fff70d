"""The scorer never raises, whatever value a solution returns (issue 56, class 1): a comparison
that cannot be made scores 0 for that test. Hypothesis draws hostile values (huge ints, NaN and
infinities, complex numbers, bytes, lone surrogates, deep nesting, objects whose `__eq__`,
`__hash__`, `__bool__` or `__repr__` raises or lies) against every expected value the shipped
problems hold; the same values also go through the result line the harness prints, and one
through `python -m rlsvc.problems score` and a code episode."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rlsvc.problems.programming import MARKER, ProgrammingProblem, UnitTest, load_problems, same, score_output


class Raises:
    def __eq__(self, other):
        raise RuntimeError("eq")

    def __hash__(self):
        raise RuntimeError("hash")

    def __repr__(self):
        raise RuntimeError("repr")


class EqualsEverything:
    def __eq__(self, other):
        return True

    def __hash__(self):
        return 0


class BadBool:
    def __bool__(self):
        raise RuntimeError("bool")


class EqReturnsBadBool:
    def __eq__(self, other):
        return BadBool()

    __hash__ = object.__hash__


class HostileInt(int):
    def __sub__(self, other):
        raise OverflowError("sub")

    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


class HostileStr(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


def nested(depth: int) -> list:
    out: list = []
    for _ in range(depth):
        out = [out]
    return out


HOSTILE_OBJECTS = [Raises(), EqualsEverything(), EqReturnsBadBool(), HostileInt(3), HostileStr("cba"), nested(3000), BadBool()]


def hostile_object(i: int) -> object:
    return HOSTILE_OBJECTS[i]


# drawn by index: Hypothesis describes a strategy by its elements' reprs
OBJECTS = st.sampled_from(range(len(HOSTILE_OBJECTS))).map(hostile_object)
CLAIMS_EQUALITY = st.sampled_from(range(5)).map(hostile_object)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.builds(lambda e, sign: sign * 10**e, st.integers(300, 4000), st.sampled_from([1, -1])),  # past any float
    st.floats(allow_nan=True, allow_infinity=True),
    st.complex_numbers(allow_nan=True, allow_infinity=True),
    st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF) | st.characters()),  # lone surrogates
    st.binary(),
)
HOSTILE = st.recursive(
    SCALARS | OBJECTS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.lists(inner, max_size=5).map(tuple),
        st.dictionaries(SCALARS.filter(lambda x: x == x), inner, max_size=4),  # NaN keys: fine too, but slow to shrink
        st.sets(
            st.sampled_from([1, 2.5, "a", b"b", None]) | CLAIMS_EQUALITY.filter(lambda o: type(o) in (EqualsEverything, HostileStr)),
            max_size=4,
        ),
        st.frozensets(st.integers(), max_size=4),
    ),
    max_leaves=20,
)
EXPECTED = sorted({t.expected for p in load_problems() for t in p.tests}) + ["{1, 2}", "{'a', 2.5}", "b'x'", "1j", "(1, [2.5])"]


# no example database: nothing written into the checkout
QUICK = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@QUICK
@given(got=HOSTILE, expected=st.sampled_from(EXPECTED), tol=st.sampled_from([0.0, 1e-6, 1e300]))
@example(got=10**400, expected="3", tol=0.0)  # OverflowError before issue 56
@example(got=-(10**400), expected="1.5", tol=1e-6)
@example(got=[EqReturnsBadBool()], expected="{1, 2}", tol=0.0)
def test_same_never_raises_and_answers_a_bool(got, expected, tol):
    assert type(same(got, ast.literal_eval(expected), tol)) is bool


@QUICK
@given(got=SCALARS | OBJECTS, expected=st.sampled_from(EXPECTED), tol=st.sampled_from([0.0, 1e-6]))
def test_same_never_raises_on_a_plain_or_hostile_scalar(got, expected, tol):
    assert type(same(got, ast.literal_eval(expected), tol)) is bool


@QUICK
@given(expected=st.sampled_from(EXPECTED), obj=CLAIMS_EQUALITY)
def test_an_object_that_claims_equality_is_not_the_expected_value(expected, obj):
    want = ast.literal_eval(expected)
    assert same(obj, want) is False and same([obj], [want]) is False and same({"k": obj}, {"k": want}) is False


def test_nesting_deeper_than_the_stack_is_not_the_expected_value():
    deep = nested(100_000)  # an object, not a literal: ast.literal_eval refuses such depth
    assert same(deep, [[1]]) is False and same(deep, deep) is False


def test_huge_ints_compare_exactly_and_never_overflow():
    assert same(10**400, 10**400) and not same(10**400, 3) and not same(10**400, 3.0, 1e-6) and not same(10**400, 1.0, 1e308)
    assert same(3, 3.0, 1e-9) and not same(float("nan"), 1.0, 1.0)


PROBLEM = ProgrammingProblem("p", "f", "f", (UnitTest("[1]", "1.5", 1e-6), UnitTest("[2]", "[1, (2, 'x')]"), UnitTest("[3]", "{'a': {1}}")))


@QUICK
@given(results=st.lists(st.one_of(st.none(), st.text(), HOSTILE.map(lambda v: _repr(v))), min_size=3, max_size=3))
def test_score_output_never_raises_on_any_result_line(results):
    stdout = f"noise\n{MARKER}n0nce " + repr({"results": results, "error": "E: \ud800"}) + "\n"
    score = score_output(stdout, "n0nce", PROBLEM)
    assert 0.0 <= score.fraction <= 1.0 and score.total == 3
    assert score.error == "E: \ud800"  # as the solution wrote it; made valid UTF-8 where it leaves (the CLI, the observation)


def _repr(value: object) -> str | None:
    try:
        return repr(value)
    except Exception:
        return None


def test_a_solution_returning_a_huge_int_scores_0_through_the_cli():
    """The scoring CLI exited 1 with OverflowError here (issue 56); a correct solution still
    scores exactly 1.0."""
    cases = [
        ("def add(a, b):\n    return 10**400\n", 0.0, None),
        ("raise ValueError('bad \\ud800')\n", 0.0, "ValueError: bad \ufffd"),  # a lone surrogate: replaced in the JSON
        ("def add(a, b):\n    return a + b\n", 1.0, None),
    ]
    for solution, score, error in cases:
        out = subprocess.run(
            [sys.executable, "-m", "rlsvc.problems", "score", "--problem", "add_two"],
            input=solution,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        record = json.loads(out.stdout)
        assert (record["score"], record["error"]) == (score, error)


def test_a_solution_that_is_not_utf8_scores_0_through_the_cli():
    out = subprocess.run(
        [sys.executable, "-m", "rlsvc.problems", "score", "--problem", "add_two"],
        input=b"def add(a, b):\n    return '\xff'\n",
        capture_output=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["score"] == 0.0
