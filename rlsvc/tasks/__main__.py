"""`python -m rlsvc.tasks score ...` and `python -m rlsvc.tasks list`, kept working: the scorer
moved to `python -m rlsvc.problems` (`rlsvc score`), and this delegates to it."""

from __future__ import annotations

import sys

from rlsvc.problems.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
