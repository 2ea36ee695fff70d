"""The asynchronous benchmark's final returns over training seeds: whether "async returns as well
as sync" holds beyond one seed, and how precisely.

Reads the results of `benchmarks/async_rollout.py` run once per seed (`--extra ... run.seed=K
--label seedK`: benchmarks/results/async_rollout_seed*.json; the suite's own run,
async_rollout.json, is seed 0 unless its `--extra` names another) and writes, per seed, each
mode's final greedy return (the median over that run's pairs) and the difference async - sync,
then the mean difference over seeds with its 95% interval (Student's t over the seeds: the seed
is the unit, not the deals) beside the episodes/s ratio per seed.

    python -m benchmarks.async_seeds

Results: benchmarks/results/async_rollout_seeds.json and its table in the .md beside it.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from benchmarks import RESULTS_DIR
from benchmarks.provenance import write_result

RESULTS = RESULTS_DIR / "async_rollout_seeds.json"
# Student's t, two-sided 95%, by degrees of freedom (the normal's 1.96 beyond the table)
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def seed_of(data: dict) -> int:
    """The `run.seed` a run's `--extra` set, else the default 0."""
    given = [e.split("=", 1)[1] for e in data["args"].get("extra", []) if e.startswith("run.seed=")]
    return int(given[-1]) if given else 0


def summarize(runs: list[dict]) -> dict:
    """Per seed (one run each; a later run of a seed replaces an earlier), the final returns and
    the ratio; over the seeds, the mean difference async - sync and its 95% interval."""
    by_seed = {seed_of(d): d for d in runs}
    rows = [
        {
            "seed": seed,
            "sync_final_return": d["sync_final_return"]["median"],
            "async_final_return": d["async_final_return"]["median"],
            "async_minus_sync": d["async_final_return"]["median"] - d["sync_final_return"]["median"],
            "episodes_per_s_ratio": d["ratio"]["median"],
            "pairs": len(d["pairs"]),
        }
        for seed, d in sorted(by_seed.items())
    ]
    diffs = [r["async_minus_sync"] for r in rows]
    mean = statistics.fmean(diffs)
    half = T95.get(len(diffs) - 1, 1.96) * statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else None
    return {
        "rows": rows,
        "seeds": len(rows),
        "mean_async_minus_sync": mean,
        "interval95": [mean - half, mean + half] if half is not None else None,
        "steps": sorted({d["args"]["steps"] for d in runs}),
    }


def markdown(data: dict) -> str:
    lines = [
        f"Final greedy return after {'/'.join(map(str, data['steps']))} steps, per training seed (median over that run's pairs), "
        "and episodes/s async / sync:\n",
        "| seed | sync | async | async - sync | episodes/s ratio |",
        "|---|---|---|---|---|",
        *(
            f"| {r['seed']} | {r['sync_final_return']:+.4f} | {r['async_final_return']:+.4f} | {r['async_minus_sync']:+.4f} | "
            f"{r['episodes_per_s_ratio']:.2f}x |"
            for r in data["rows"]
        ),
    ]
    interval = data["interval95"]
    lines.append(
        f"\nOver {data['seeds']} seeds, async - sync: mean {data['mean_async_minus_sync']:+.4f}"
        + (f", 95% interval [{interval[0]:+.3f}, {interval[1]:+.3f}] (Student's t over the seeds)." if interval else ".")
    )
    return "\n".join(lines)


def main() -> None:
    paths = [RESULTS_DIR / "async_rollout.json", *sorted(RESULTS_DIR.glob("async_rollout_seed[0-9]*.json"))]
    runs = [json.loads(p.read_text()) for p in paths if p.exists()]
    if not runs:
        raise SystemExit(f"no async_rollout results under {RESULTS_DIR}: run python -m benchmarks.async_rollout first")
    data = write_result(
        RESULTS, {"from": [str(Path("benchmarks/results") / p.name) for p in paths if p.exists()], **summarize(runs)}, markdown
    )
    print(markdown(data))


if __name__ == "__main__":
    main()
