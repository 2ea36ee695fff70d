"""`rlsvc score --problem ID < solution.py`: `python -m rlsvc.problems score` as a command of its
own (rlsvc/cli.py)."""

from __future__ import annotations

import sys

from rlsvc.problems.__main__ import main as problems_main


def main(argv: list[str] | None = None) -> int:
    return problems_main(["score", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
