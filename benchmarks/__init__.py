"""rlsvc's benchmarks. `python -m benchmarks` runs the suite (see `__main__.py`); each module
also runs alone, `python -m benchmarks.<name>`."""

import os
from pathlib import Path

# where the modules write their JSON; the suite runner points its --quick runs elsewhere
RESULTS_DIR = Path(os.environ.get("RLSVC_BENCH_RESULTS") or Path(__file__).parent / "results")
