"""Small programming problems written for rlsvc (`programming.jsonl`), each with hidden unit
tests: the reward of a submission is the fraction of its tests that pass when the submission and
the tests run together in a sandbox."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PROBLEMS_FILE = Path(__file__).with_name("programming.jsonl")
MARKER = "<<rlsvc-tests "


@dataclass(frozen=True)
class ProgrammingProblem:
    id: str
    entry_point: str
    prompt: str
    tests: tuple[str, ...]
    """Python expressions that must evaluate true, each on its own (hidden from the policy)."""


@cache
def load_problems(path: str | Path = PROBLEMS_FILE) -> tuple[ProgrammingProblem, ...]:
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            row = json.loads(line)
            out.append(ProgrammingProblem(row["id"], row["entry_point"], row["prompt"], tuple(row["tests"])))
            if not out[-1].tests:
                raise ValueError(f"{path}:{n}: problem {row['id']} has no tests")
    return tuple(out)


def unit_test_program(problem: ProgrammingProblem, solution: str) -> tuple[str, str]:
    """Program that runs `solution`, then every hidden test on its own, and prints the count on
    a line tagged with a fresh nonce; returns (program, nonce). The solution runs first, so a
    result line it prints itself cannot be the last one. Not proof against code that reads this
    program from disk and then exits early: scoring takes the last tagged line with the nonce."""
    nonce = secrets.token_hex(8)
    program = f"""
import json as _rlsvc_json
_rlsvc_ns = {{"__name__": "solution"}}
_rlsvc_error = None
try:
    exec(compile({solution!r}, "solution.py", "exec"), _rlsvc_ns)
except BaseException as e:
    _rlsvc_error = f"{{type(e).__name__}}: {{e}}"[:300]
_rlsvc_passed = 0
for _rlsvc_test in {list(problem.tests)!r}:
    try:
        if _rlsvc_error is None and eval(_rlsvc_test, _rlsvc_ns) is True:
            _rlsvc_passed += 1
    except BaseException:
        pass
print("\\n{MARKER}{nonce} " + _rlsvc_json.dumps({{"passed": _rlsvc_passed, "total": {len(problem.tests)}, "error": _rlsvc_error}}), flush=True)
"""
    return program, nonce


def score_output(stdout: str, nonce: str, total: int) -> tuple[float, str | None]:
    """(fraction of tests passed, the solution's error if it raised) from the harness's output;
    0.0 when the result line is missing (the run was killed, timed out or cheated)."""
    tag = f"{MARKER}{nonce} "
    lines = [ln for ln in stdout.splitlines() if ln.startswith(tag)]
    if not lines:
        return 0.0, "no test result (the run was killed or timed out)"
    result = json.loads(lines[-1][len(tag) :])
    return result["passed"] / max(total, 1), result["error"]
