"""The env-scaling benchmark's quick run, apart from the other quick runs
(tests/e2e/test_bench_quick.py, which `make test` runs two at a time): its simulated multi-node
cluster (`ray.cluster_utils.Cluster`) is the machine's current Ray cluster while it runs, and a
process started meanwhile without a cluster address joins that one (the step speed-up bench's
earlier-commit job would), so it runs with the tests one at a time."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_bench_quick import quick_args, run_bench

pytestmark = pytest.mark.e2e


def test_env_scaling_quick_plays_whole_hands(tmp_path: Path):
    data = run_bench("env_scaling", quick_args("env_scaling"), tmp_path)
    assert [(r["env_actors"], r["slot_groups"]) for r in data["rows"]] == [(1, 1), (2, 1), (2, 2)]
    for row in data["rows"]:
        # constrained answers: every hand is played, none ends on an invalid answer
        assert row["invalid_share"] == 0 and row["mean_turns"] > 1 and row["env_steps_per_s"] > row["episodes_per_s"]
