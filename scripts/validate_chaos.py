"""The acceptance chaos run (issue 62): for each loop (synchronous, asynchronous), the default job
trains once undisturbed and once while the fault injector (`python -m rlsvc.chaos`) kills a random
rlsvc actor every 20 s for 3 minutes, both with the default settings (fault budgets included). The
chaos job must finish, and its saved policy's greedy return on the held-out deals (eval.episodes,
20,000) must be within `--tolerance` (0.02) of the undisturbed job's.

    python scripts/validate_chaos.py [--loops sync,async] [--tolerance 0.02] [overrides ...]
    make validate-chaos [ARGS="--loops async"]

Writes benchmarks/results/validate_chaos_<loop>.json; exits 1 when a job fails or a gap is too
wide. Long and CPU-heavy (four default jobs, about 12 minutes each at most): run it alone.
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
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
LOOPS = {"sync": [], "async": ["rollout.asynchronous=true", "buffer.max_staleness=1"]}
KINDS = ("policy_group", "rollout_worker", "env", "reward", "buffer")


def start_chaos(work: Path, env: dict, every: float, duration: float, out: Any) -> subprocess.Popen | None:
    """The injector, once the job trains (its step-0 checkpoint exists); None before that."""
    address = re.search(r"ray=(127\.0\.0\.1:\d+)", (work / "stdout").read_text())
    if not (address and list((work / "runs").glob("*/checkpoints/step_00000000"))):
        return None
    cmd = [sys.executable, "-m", "rlsvc.chaos", "--address", address.group(1), "--every", str(every), "--duration", str(duration)]
    return subprocess.Popen([*cmd, "--seed", "1"], env=env, stdout=out, stderr=subprocess.STDOUT)


def run_job(work: Path, overrides: list[str], chaos: tuple[float, float] | None) -> dict:
    """One job (with the injector when `chaos` = (every, duration)); what it did and returned."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    uri = f"sqlite:///{work / 'mlflow.db'}"
    cmd = [sys.executable, "-m", "rlsvc.train", f"run.output_dir={work / 'runs'}", f"tracking.tracking_uri={uri}", *overrides]
    t0 = time.time()
    injector = None
    with open(work / "stdout", "w") as out, open(work / "chaos", "w") as chaos_out:
        job = subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            while chaos and job.poll() is None and injector is None:
                injector = start_chaos(work, env, *chaos, chaos_out)
                time.sleep(1)
            code = job.wait(timeout=3600)
            if injector is not None:
                injector.wait(timeout=600)
        finally:
            for p in (job, injector):
                if p is not None and p.poll() is None:
                    p.kill()
    if code != 0:
        return {"exit_code": code, "output_tail": (work / "stdout").read_text()[-3000:], "wall_s": time.time() - t0}
    return {"exit_code": 0, "wall_s": time.time() - t0, **job_record(work, uri)}


def job_record(work: Path, uri: str) -> dict:
    from mlflow.tracking import MlflowClient

    result = json.loads(next((work / "runs").glob("*/result.json")).read_text())
    client = MlflowClient(uri)
    kills = [json.loads(line) for line in (work / "chaos").read_text().splitlines() if line.startswith("{")]
    killed = [k for k in kills if "killed" in k]  # the injector's line per kill: its summary is missing when the job ends first
    return {
        "kills": len(killed),
        "by_actor": dict(Counter(k["killed"] for k in killed)),
        "killed": [(k["t_s"], k["killed"]) for k in killed],
        "steps": result["steps"],
        # the job's own final counts (MLflow's latest value is the one at the highest step, and
        # a recovery rewinds the step, so it can be an older count)
        "restarts": {kind: result["faults"].get(f"faults/restarts/{kind}", 0.0) for kind in KINDS},
        "steps_redone": result["faults"].get("faults/steps_redone", 0.0),
        "recovery_s": result["faults"].get("faults/recovery_s", 0.0),
        "groups_dropped": sum(m.value for m in client.get_metric_history(result["mlflow_run_id"], "groups_dropped")),
        "eval": result["eval"],
    }


def summary(undisturbed: dict, chaos: dict, tolerance: float) -> dict:
    """The figures docs/faults.md shows, as one object of plain values."""
    base, hit = undisturbed.get("eval", {}).get("mean_return"), chaos.get("eval", {}).get("mean_return")
    gap = None if base is None or hit is None else hit - base
    return {
        "kills": chaos.get("kills", 0),
        "steps": chaos.get("steps"),
        **{f"restarts_{kind}": chaos.get("restarts", {}).get(kind, 0.0) for kind in KINDS},
        "steps_redone": chaos.get("steps_redone"),
        "recovery_s": round(chaos.get("recovery_s", 0.0), 1),
        "groups_dropped": chaos.get("groups_dropped"),
        "wall_s": round(chaos["wall_s"], 1),
        "greedy_return_20000_deals": hit,
        "undisturbed_greedy_return": base,
        "gap": None if gap is None else round(gap, 4),
        "passed": chaos["exit_code"] == 0 and gap is not None and abs(gap) <= tolerance,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loops", default="sync,async", help="which loops to test, of: sync, async")
    ap.add_argument("--every", type=float, default=20.0, help="seconds between kills")
    ap.add_argument("--duration", type=float, default=180.0, help="seconds of chaos")
    ap.add_argument("--tolerance", type=float, default=0.02, help="largest gap of greedy returns allowed")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    passed = True
    for loop in args.loops.split(","):
        overrides = [*LOOPS[loop], *args.overrides]
        with tempfile.TemporaryDirectory(prefix="rlsvc-chaos-") as a, tempfile.TemporaryDirectory(prefix="rlsvc-chaos-") as b:
            undisturbed = run_job(Path(a), overrides, None)
            chaos = run_job(Path(b), overrides, (args.every, args.duration))
        record = {"command": " ".join(["python scripts/validate_chaos.py", "--loops", loop, *args.overrides]), "overrides": overrides}
        record |= {"undisturbed": undisturbed, **chaos, "summary": summary(undisturbed, chaos, args.tolerance)}
        (RESULTS / f"validate_chaos_{loop}.json").write_text(json.dumps(record, indent=2) + "\n")
        print(json.dumps({"loop": loop, **record["summary"], "by_actor": chaos.get("by_actor")}, indent=2))
        passed = passed and record["summary"]["passed"]
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
