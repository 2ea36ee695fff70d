"""What a scripts/gpu_smoke.sh run measured, and what it needs before it starts.

    python scripts/gpu_smoke_report.py RUNS_DIR [--label TEXT] [--reasoning]
    python scripts/gpu_smoke_report.py --gpus-needed CONFIG [key.sub=value ...]

The first form reads the one job under RUNS_DIR (its result.json, then its per-step metrics from
MLflow) and prints rollout tokens/s, step time and its parts, and weight-sync time, with the
start-up and the first weight sync. With `--reasoning` (the GSM8K run) it also prints the
per-step reasoning metrics and the final greedy evaluation on the test split, and exits 1 naming
whatever of them was not logged: a run that finished without them is not a passed smoke test.

The second form prints the GPUs the config's placement plan asks for, with the overrides; a bad
config is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

TIMING_ROWS = (
    ("rollout tokens/s", "tokens_per_s"),
    ("step time (s)", "time/step_s"),
    ("  rollout (s)", "time/rollout_s"),
    ("  train (s)", "time/train_s"),
    ("  weight sync (s)", "time/sync_s"),
    ("  sync transport (s)", "sync/total_s"),
)
# logged at every step by the reasoning task and the loop (docs/reasoning.md)
REASONING_STEP_METRICS = (
    "strict_accuracy",
    "lenient_accuracy",
    "format_rate",
    "malformed_rate",
    "zero_variance_group_rate",
    "response_len_mean",
    "response_truncated_rate",
)
# the final evaluation's, in MLflow under eval/ and in result.json under "eval"
EVAL_METRICS = ("strict_accuracy", "lenient_accuracy", "format_rate")


def gpus_needed(config: str, overrides: list[str]) -> int:
    from rlsvc.cluster.placement import group_demand, planned
    from rlsvc.config import ConfigError, load_config

    try:
        cfg = load_config(config, overrides)
    except ConfigError as e:
        print(f"gpu_smoke: {e}", file=sys.stderr)
        return 2
    print(f"{group_demand(planned(cfg))['gpu'][1]:g}")
    return 0


def row(label: str, values: list[float]) -> str:
    later = f"{sum(values[1:]) / len(values[1:]):.3f}" if len(values) > 1 else "-"
    return f"{label:<26}{values[0]:>12.3f}{later:>20}{values[-1]:>12.3f}"


def summary(result: dict[str, Any], history: dict[str, dict[int, float]], label: str, reasoning: bool) -> tuple[list[str], list[str]]:
    """The report's lines, and the metrics a reasoning run should have logged and did not.
    `history` maps a metric to its value per step (step 0: before the first step)."""
    lines = [f"\ngpu_smoke: {label}: {result['steps']} steps", f"{'':<26}{'step 1':>12}{'later steps, mean':>20}{'last':>12}"]
    rows = list(TIMING_ROWS) + ([(key, key) for key in REASONING_STEP_METRICS] if reasoning else [])
    missing = []
    for label_, key in rows:
        per_step = {s: v for s, v in history.get(key, {}).items() if s >= 1}
        if per_step:
            lines.append(row(label_, [per_step[s] for s in sorted(per_step)]))
        elif reasoning and key in REASONING_STEP_METRICS:
            missing.append(key)
    first_sync = history.get("sync/total_s", {}).get(0)
    lines.append(
        f"start-up {result['startup_s']:.1f} s (download, engines, trainers, first weight sync"
        + (f" {first_sync:.2f} s)" if first_sync is not None else ")")
    )
    lines.append(f"training {result['train_s']:.1f} s, {result['episodes_per_s']:.1f} episodes/s; whole job {result['total_s']:.1f} s")
    if reasoning:
        final = result.get("eval") or {}
        logged = {k: v for k, v in final.items() if k in EVAL_METRICS and history.get(f"eval/{k}")}
        missing += [f"eval/{k}" for k in EVAL_METRICS if k not in logged]
        if logged:
            shown = ", ".join(f"{k} {v:.3f}" for k, v in logged.items())
            lines.append(f"final greedy evaluation on {final.get('episodes', '?')} test problems: {shown}")
    return lines, missing


def report(runs_dir: Path, label: str, reasoning: bool) -> int:
    from mlflow.tracking import MlflowClient

    found = sorted(runs_dir.glob("*/result.json"))
    if len(found) != 1:
        print(f"gpu_smoke: {label}: expected one result.json under {runs_dir}, found {len(found)}", file=sys.stderr)
        return 1
    result = json.loads(found[0].read_text())
    client = MlflowClient(result["tracking_uri"])
    keys = [k for _, k in TIMING_ROWS] + ([*REASONING_STEP_METRICS, *(f"eval/{k}" for k in EVAL_METRICS)] if reasoning else [])
    history = {k: {m.step: m.value for m in client.get_metric_history(result["mlflow_run_id"], k)} for k in keys}
    lines, missing = summary(result, history, label, reasoning)
    print("\n".join(lines))
    if missing:
        print(f"gpu_smoke: {label}: the run finished without logging {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target", help="RUNS_DIR, or with --gpus-needed the config")
    ap.add_argument("overrides", nargs="*", help="with --gpus-needed: config overrides")
    ap.add_argument("--gpus-needed", action="store_true", help="print the GPUs the config's plan asks for")
    ap.add_argument("--label", default="smoke run", help="the run's name in the report")
    ap.add_argument("--reasoning", action="store_true", help="require the reasoning metrics and the final evaluation's")
    args = ap.parse_args(argv)
    if args.gpus_needed:
        return gpus_needed(args.target, args.overrides)
    return report(Path(args.target), args.label, args.reasoning)


if __name__ == "__main__":
    sys.exit(main())
