"""Score one submission the way training does.

    python -m rlsvc.problems score --problem ID [--backend local|together] < solution.py
    rlsvc score --problem ID < solution.py         (the same; rlsvc/problems/score.py)

Runs the solution against the problem's hidden tests in a fresh sandbox session (the local one by
default; `together` uses Together's Code Interpreter, with TOGETHER_API_KEY and optionally
`--together-base-url`) and prints one JSON object: problem, score (the fraction of tests
passed: the reward an `answer` action earns before error penalties), passed, total, outcome
(solved, partial, wrong) and error (the solution's own, or why no result could be read).
`python -m rlsvc.problems list` prints the problem ids. (`python -m rlsvc.tasks score|list`,
where this lived before, delegates here.)
"""

from __future__ import annotations

import argparse
import json
import sys

from rlsvc.problems.programming import load_problems, problem_by_id
from rlsvc.sandbox.text import valid_utf8


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m rlsvc.problems", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    score = sub.add_parser("score", help="score the solution on standard input against a problem's hidden tests")
    score.add_argument("--problem", required=True, help="the problem's id (`python -m rlsvc.problems list`)")
    score.add_argument("--backend", choices=["local", "together"], default="local")
    score.add_argument("--together-base-url", default=None, help="the Code Interpreter's URL (default: Together's)")
    score.add_argument("--timeout-s", type=float, default=5.0, help="the run's time limit, as env.code.exec_timeout_s")
    sub.add_parser("list", help="the programming problems' ids")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "list":
        print("\n".join(p.id for p in load_problems()))
        return 0
    try:
        problem = problem_by_id(args.problem)
    except KeyError as e:
        print(f"rlsvc.problems: {e.args[0]}", file=sys.stderr)
        return 2
    from rlsvc.envs.code_interpreter import CodeEnvSettings, make_backend, score_solution

    backend = make_backend(CodeEnvSettings(backend=args.backend, exec_timeout_s=args.timeout_s, together_base_url=args.together_base_url))
    try:
        solution = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")  # bytes that are not UTF-8: its SyntaxError
        score, _ = score_solution(backend, problem, solution)
    except Exception as e:  # the backend, not the solution: no score
        print(f"rlsvc.problems: the {args.backend} backend failed: {type(e).__name__}: {e}"[:300], file=sys.stderr)
        return 1
    finally:
        backend.close()
    record = {
        "problem": problem.id,
        "score": score.fraction,
        "passed": score.passed,
        "total": score.total,
        "outcome": score.outcome,
        "error": score.error if score.error is None else valid_utf8(score.error)[0],  # the solution's text: made valid UTF-8
    }
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
