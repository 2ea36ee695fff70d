"""Small programming problems written for rlsvc (`programming.jsonl`), each with hidden unit
tests, and how a submission is scored against them.

A test is data: the entry point's arguments and the value it must return (Python literals), with
a tolerance for float results. The tests' expected values never enter the sandbox: the harness
(`unit_test_program`) runs the submission, calls the entry point with each test's arguments and
prints every return value as a Python literal; the service (`score_output`) reads them back with
`ast.literal_eval` (data only, size-capped) and compares them with the expected values itself,
types included. Code running beside the harness can print anything, patch anything and exit
whenever it likes: what it prints is still only a claim about return values, which scores only
where the claim is the right answer. A missing or malformed result scores 0 (it is the
submission's doing, never an infrastructure failure), and the score is clamped to [0, 1].
"""

from __future__ import annotations

import ast
import json
import math
import secrets
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

PROBLEMS_FILE = Path(__file__).with_name("programming.jsonl")
MARKER = "<<rlsvc-results "
RESULT_CHARS = 10_000
"""The longest return value (as a literal) a test reads back; a longer one fails that test."""


@dataclass(frozen=True)
class UnitTest:
    args: str
    """The entry point's positional arguments, a Python list literal."""
    expected: str
    """The value the call must return, a Python literal."""
    tol: float = 0.0
    """Absolute tolerance where the expected value is a float."""


@dataclass(frozen=True)
class ProgrammingProblem:
    id: str
    entry_point: str
    prompt: str
    tests: tuple[UnitTest, ...]
    """Hidden from the policy; only the arguments reach the sandbox."""


@dataclass(frozen=True)
class Score:
    passed: int
    total: int
    error: str | None
    """The submission's own error (it raised when run), or why no result could be read."""

    @property
    def fraction(self) -> float:
        return min(max(self.passed / max(self.total, 1), 0.0), 1.0)

    @property
    def outcome(self) -> str:
        return "solved" if self.passed == self.total else "partial" if self.passed else "wrong"


@cache
def load_problems(path: str | Path = PROBLEMS_FILE) -> tuple[ProgrammingProblem, ...]:
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            row = json.loads(line)
            tests = tuple(UnitTest(t["args"], t["expected"], float(t.get("tol", 0.0))) for t in row["tests"])
            if not tests:
                raise ValueError(f"{path}:{n}: problem {row['id']} has no tests")
            for t in tests:  # both must be literals: they are read with ast.literal_eval
                if not isinstance(ast.literal_eval(t.args), list):
                    raise ValueError(f"{path}:{n}: problem {row['id']}: args {t.args!r} is not a list literal")
                ast.literal_eval(t.expected)
            out.append(ProgrammingProblem(row["id"], row["entry_point"], row["prompt"], tests))
    return tuple(out)


def problem_by_id(problem_id: str) -> ProgrammingProblem:
    problems = {p.id: p for p in load_problems()}
    if problem_id not in problems:
        raise KeyError(f"no programming problem {problem_id!r} (there are {len(problems)}: {', '.join(sorted(problems)[:5])}, ...)")
    return problems[problem_id]


def unit_test_program(problem: ProgrammingProblem, solution: str) -> tuple[str, str]:
    """The program the sandbox runs: the solution, then the entry point called with each test's
    arguments, every return value printed as a literal (plain types only: a subclass such as
    Counter is read as its base type) on one line tagged with a fresh nonce. Returns (program,
    nonce). The nonce only keeps the solution's ordinary output apart from the results."""
    nonce = secrets.token_hex(8)
    calls = "[" + ", ".join(t.args for t in problem.tests) + "]"
    program = f"""
_rlsvc_ns = {{"__name__": "solution"}}
_rlsvc_error = None
try:
    exec(compile({solution!r}, "solution.py", "exec"), _rlsvc_ns)
except BaseException as e:
    _rlsvc_error = f"{{type(e).__name__}}: {{e}}"[:300]


def _rlsvc_plain(x):
    if x is None or isinstance(x, bool):
        return x
    for kind in (int, float, str):
        if isinstance(x, kind):
            return kind(x)
    if isinstance(x, dict):
        return {{_rlsvc_plain(k): _rlsvc_plain(v) for k, v in x.items()}}
    for kind in (list, tuple, set, frozenset):
        if isinstance(x, kind):
            return kind(_rlsvc_plain(v) for v in x)
    raise TypeError(type(x).__name__)


_rlsvc_results = []
for _rlsvc_args in {calls}:
    try:
        _rlsvc_out = repr(_rlsvc_plain(_rlsvc_ns[{problem.entry_point!r}](*_rlsvc_args)))
    except BaseException:
        _rlsvc_out = None
    _rlsvc_results.append(_rlsvc_out if _rlsvc_out is not None and len(_rlsvc_out) <= {RESULT_CHARS} else None)
print("\\n{MARKER}{nonce} " + repr({{"results": _rlsvc_results, "error": _rlsvc_error}}), flush=True)
"""
    return program, nonce


def score_output(stdout: str, nonce: str, problem: ProgrammingProblem) -> Score:
    """The submission's score from the harness's output: each return value read back and compared
    with the expected one here. Never raises: a missing or malformed result line scores 0."""
    total = len(problem.tests)
    tag = f"{MARKER}{nonce} "
    lines = [ln for ln in stdout.splitlines() if ln.startswith(tag)]
    if not lines:
        return Score(0, total, "no test result (the run was killed, timed out or exited early)")
    record = _literal(lines[-1][len(tag) :], limit=total * (4 * RESULT_CHARS + 16) + 1000)  # repr escapes: up to 4 chars each
    results = record.get("results") if isinstance(record, dict) else None
    if not isinstance(results, list) or len(results) != total:
        return Score(0, total, "malformed test result")
    error = record.get("error")
    passed = sum(
        isinstance(got, str) and same(_literal(got, RESULT_CHARS), ast.literal_eval(t.expected), t.tol)
        for got, t in zip(results, problem.tests)
    )
    return Score(passed, total, error[:300] if isinstance(error, str) else None)


_MISSING = object()


def _literal(text: str, limit: int) -> Any:
    """A Python literal from untrusted text, or a sentinel that equals nothing expected."""
    if len(text) > limit:
        return _MISSING
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _MISSING


_SCALARS = (type(None), bool, int, float, complex, str, bytes)


def same(got: Any, want: Any, tol: float = 0.0) -> bool:
    """`got == want` with types: True is not 1, a list is not a tuple; numbers compare by value
    (an int result may meet a float expectation), within `tol` where the expected value is a
    float; NaN equals nothing. Never raises: a value that cannot be compared with the expected
    one (an int too large for a float, a nesting deeper than the stack, an object that is not a
    plain literal, whose `__eq__`, `__hash__` or `__repr__` raises or lies) is not it."""
    try:
        return _same(got, want, tol)
    except Exception:  # OverflowError, RecursionError, MemoryError, whatever a hostile object raises
        return False


def _same(got: Any, want: Any, tol: float) -> bool:
    if want is None or isinstance(want, bool):
        return got is want
    if isinstance(want, (int, float)):
        if type(got) not in (int, float) or (type(got) is float and not math.isfinite(got)):
            return False
        # int == int and int == float compare exactly at any size; a float expectation needs
        # the difference as a float, which an int past 1e308 cannot give (OverflowError: not it)
        return abs(got - want) <= tol if isinstance(want, float) else bool(got == want)
    if type(got) is not type(want):  # exact types: a subclass of a literal type is not a literal
        return False
    if isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(_same(g, w, tol) for g, w in zip(got, want))
    if isinstance(want, dict):
        keys = list(got)
        return all(type(k) in _SCALARS for k in keys) and got.keys() == want.keys() and all(_same(got[k], want[k], tol) for k in want)
    if isinstance(want, (set, frozenset)):  # elements compared by the set's own ==: plain scalars only
        return all(type(x) in _SCALARS for x in got) and bool(got == want)
    return bool(got == want)  # str, bytes, complex
