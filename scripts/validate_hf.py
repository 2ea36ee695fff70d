"""Learning through the pretrained-model path: run configs/blackjack_hf_tiny.yaml and check that
its final greedy evaluation (20,000 held-out deals) reaches the target within the wall-time
limit; write the result and the validation curve to benchmarks/results/validate_blackjack_hf_tiny.json.

    python scripts/validate_hf.py                      # run the job (about 20 minutes here)
    python scripts/validate_hf.py --from-run RUN_DIR   # read a finished run of the same config
        [--out FILE]                                   # (e.g. one with another run.seed) into FILE

Exit status 0 when both hold, 1 when either misses (the file is written either way).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = "configs/blackjack_hf_tiny.yaml"
OUT = REPO / "benchmarks" / "results" / "validate_blackjack_hf_tiny.json"
TARGET_RETURN = -0.08
LIMIT_MINUTES = 20.0


def run_job(output_dir: Path) -> Path:
    """The config's job as a user runs it; returns its run folder."""
    cmd = [sys.executable, "-m", "rlsvc.train", "--config", CONFIG, f"run.output_dir={output_dir}"]
    subprocess.run(cmd, cwd=REPO, check=True)
    [run_dir] = [p for p in output_dir.iterdir() if p.is_dir() and p.name.startswith("blackjack_hf_tiny-")]
    return run_dir


def history(result: dict, key: str) -> list[list[float]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(result["tracking_uri"])
    return [[m.step, round(m.value, 4)] for m in sorted(client.get_metric_history(result["mlflow_run_id"], key), key=lambda m: m.step)]


def curve(result: dict) -> list[dict]:
    """At every validation: the greedy return on the validation deals, and the sampled policy's
    training return and invalid-answer rate over the 10 steps up to it."""
    from rlsvc.tracking.plots import smoothed

    def trailing_mean(key: str) -> dict[int, float]:  # per step (a job logs every step)
        rows = history(result, key)
        return {int(s): round(v, 4) for (s, _), v in zip(rows, smoothed([v for _, v in rows]))}

    ret, inv = trailing_mean("return_mean"), trailing_mean("invalid_rate")
    return [
        {
            "step": int(step),
            "greedy validation return": value,
            "training return (mean of 10 steps)": ret.get(int(step), float("nan")),
            "invalid answers (mean of 10 steps)": inv.get(int(step), float("nan")),
        }
        for step, value in history(result, "eval/val_return")
    ]


def summarise(run_dir: Path) -> dict:
    import yaml

    result = json.loads((run_dir / "result.json").read_text())
    seed = yaml.safe_load((run_dir / "config.yaml").read_text())["run"]["seed"]
    final = result["eval"]["mean_return"]
    minutes = result["total_s"] / 60
    return {
        "config": CONFIG,
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{__import__('os').cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}",
        "command": "make validate-hf" if seed == 0 else f"python -m rlsvc.train --config {CONFIG} run.seed={seed}",
        "seed": seed,
        "rows": [
            {"what": "final greedy return, 20,000 held-out deals", "measured": round(final, 4), "target": f">= {TARGET_RETURN}"},
            {
                "what": "wall time (start-up, training, evaluation)",
                "measured": f"{minutes:.1f} min",
                "target": f"<= {LIMIT_MINUTES:.0f} min",
            },
            {"what": "GRPO steps", "measured": result["steps"], "target": ""},
            {"what": "best validation return (its step's policy is the one saved)", "measured": result["best_val_return"], "target": ""},
            {"what": "start-up (cluster, model load, warm start)", "measured": f"{result['startup_s']:.0f} s", "target": ""},
        ],
        "met": bool(final >= TARGET_RETURN and minutes <= LIMIT_MINUTES),
        "curve": curve(result),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--from-run", type=Path, help="a finished run folder of the same config")
    p.add_argument("--out", type=Path, default=OUT, help=f"the results file (default {OUT.relative_to(REPO)})")
    args = p.parse_args(argv)
    if args.from_run:
        run_dir = args.from_run
    else:
        run_dir = run_job(Path(tempfile.mkdtemp(prefix="rlsvc-validate-")))
    summary = summarise(run_dir)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    for row in summary["rows"]:
        print(f"{row['what']}: {row['measured']} {row['target']}")
    print(f"met: {summary['met']}  ({args.out})")
    return 0 if summary["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
