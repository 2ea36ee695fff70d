"""A job under chaos, for the record: the default job (plus any overrides) trains while the fault
injector (`python -m rlsvc.chaos`) kills a random rlsvc actor every 20 s for 3 minutes; the job
must finish, and its held-out greedy return is reported with what the chaos did and what the job
absorbed. Give it steps enough to outlast the chaos (run.steps, run.time_budget_minutes). The CI version of the synchronous case is tests/e2e/test_train_learns.py.

    python scripts/validate_chaos.py [--label L] [overrides ...]
    make validate-chaos ARGS="--label async rollout.asynchronous=true buffer.max_staleness=1"

Writes benchmarks/results/validate_chaos[_L].json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--label", default="")
    ap.add_argument("--every", type=float, default=20.0, help="seconds between kills")
    ap.add_argument("--duration", type=float, default=180.0, help="seconds of chaos")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    with tempfile.TemporaryDirectory(prefix="rlsvc-chaos-") as tmp:
        work = Path(tmp)
        uri = f"sqlite:///{work / 'mlflow.db'}"
        cmd = [sys.executable, "-m", "rlsvc.train", f"run.output_dir={work / 'runs'}", f"tracking.tracking_uri={uri}"]
        cmd += ["run.checkpoint_every=5", "faults.max_policy_restarts=20", *args.overrides]
        t0 = time.time()
        with open(work / "stdout", "w") as out, open(work / "chaos", "w") as chaos_out:
            job = subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT)
            chaos = None
            try:
                while job.poll() is None and chaos is None:  # once it trains: its step-0 checkpoint exists
                    address = re.search(r"ray=(127\.0\.0\.1:\d+)", (work / "stdout").read_text())
                    if address and list((work / "runs").glob("*/checkpoints/step_00000000")):
                        chaos_cmd = [sys.executable, "-m", "rlsvc.chaos", "--address", address.group(1)]
                        chaos_cmd += ["--every", str(args.every), "--duration", str(args.duration), "--seed", "1"]
                        chaos = subprocess.Popen(chaos_cmd, env=env, stdout=chaos_out, stderr=subprocess.STDOUT)
                    time.sleep(1)
                code = job.wait(timeout=3600)
                if chaos is not None:
                    chaos.wait(timeout=600)
            finally:
                for p in (job, chaos):
                    if p is not None and p.poll() is None:
                        p.kill()
        if code != 0:
            print((work / "stdout").read_text()[-3000:], file=sys.stderr)
            print(f"validate_chaos: the job exited with {code}", file=sys.stderr)
            return 1
        from mlflow.tracking import MlflowClient

        result = json.loads(next((work / "runs").glob("*/result.json")).read_text())
        kills = [json.loads(line) for line in (work / "chaos").read_text().splitlines() if line.startswith("{")]
        metrics = MlflowClient(uri).get_run(result["mlflow_run_id"]).data.metrics
        dropped = sum(m.value for m in MlflowClient(uri).get_metric_history(result["mlflow_run_id"], "groups_dropped"))
        record = {
            "command": " ".join(["python scripts/validate_chaos.py", *(["--label", args.label] if args.label else []), *args.overrides]),
            "overrides": args.overrides,
            "wall_s": time.time() - t0,
            # from the injector's line per kill: its summary line is missing when the job ends first
            "kills": sum("killed" in k for k in kills),
            "by_actor": dict(Counter(k["killed"] for k in kills if "killed" in k)),
            "killed": [(k["t_s"], k["killed"]) for k in kills if "killed" in k],
            "steps": result["steps"],
            "policy_restarts": metrics.get("faults/policy_restarts", 0.0),
            "steps_redone": metrics.get("faults/steps_redone", 0.0),
            "rollout_replacements": metrics.get("rollout_replacements_total", 0.0),
            "groups_dropped": dropped,
            "eval": result["eval"],
        }
    record["summary"] = summary(record)
    path = RESULTS / (f"validate_chaos_{args.label}.json" if args.label else "validate_chaos.json")
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record["summary"] | {"by_actor": record["by_actor"]}, indent=2))
    return 0


def summary(record: dict) -> dict:
    """The figures docs/faults.md shows, as one object of plain values."""
    return {
        "kills": record["kills"],
        "steps": record["steps"],
        "policy_group_restarts": record["policy_restarts"],
        "steps_redone": record["steps_redone"],
        "rollout_replacements": record["rollout_replacements"],
        "groups_dropped": record["groups_dropped"],
        "wall_s": round(record["wall_s"], 1),
        "greedy_return_20000_deals": record["eval"]["mean_return"],
    }


if __name__ == "__main__":
    sys.exit(main())
