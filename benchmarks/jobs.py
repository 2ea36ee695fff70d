"""Running real training jobs (`python -m rlsvc.train`) from a benchmark and reading back what
they logged: `result.json` and the per-step metrics in their MLflow run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TRAINING_ONLY = ["tracking.log_model=false", "cluster.include_dashboard=false"]
"""Overrides for the jobs of a benchmark that times training only (its steps and training loop,
not the whole job): the end of such a job logs its checkpoint but no MLflow model, which would
copy it again and load it once more in the driver (docs/tracking.md), and its local Ray cluster
starts no dashboard, which nobody watches here. Jobs compared with an older commit's
(`step_speedup`) keep the defaults: that commit has no such settings, and their whole-job times
must count the same work."""


def run_job(
    name: str, overrides: list[str], out: Path, config: str | None = None, tree: Path | None = None, pythonpath: Path | None = None
) -> dict:
    """One job to completion in its own process, output in `out`; returns its result.json.
    `tree`: run another checkout's rlsvc (its folder first on the path of the driver and of
    every Ray worker, which inherit the environment) instead of this one. `pythonpath`: a folder
    the job imports from as well (a plug-in task's), on the same path."""
    cmd = [
        sys.executable,
        "-m",
        "rlsvc.train",
        *(["--config", config] if config else []),
        f"run.name={name}",
        f"run.output_dir={out}",
        f"tracking.tracking_uri=sqlite:///{out}/mlflow.db",
        *overrides,
    ]
    print("$", " ".join(cmd), flush=True)
    first = [str(p) for p in (tree, pythonpath) if p is not None]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*first, *filter(None, [os.environ.get("PYTHONPATH")])])} if first else None
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=tree, env=env)
    (result,) = out.glob(f"{name}-*/result.json")
    return json.loads(result.read_text())


def metric_sums(result: dict, keys: list[str]) -> dict[str, float]:
    """The sum over all steps of each metric of the job's MLflow run (0 for one never logged)."""
    return {k: sum(values) for k, values in metric_histories(result, keys).items()}


def metric_histories(result: dict, keys: list[str]) -> dict[str, list[float]]:
    """Each metric of the job's MLflow run, in step order ([] for one never logged)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=result["tracking_uri"])
    return {k: [m.value for m in sorted(client.get_metric_history(result["mlflow_run_id"], k), key=lambda m: m.step)] for k in keys}


def loop_window(result: dict) -> tuple[float, float]:
    """When the job's training loop ran (seconds since the epoch): from its first step's start
    (the first logged `time/step_s`, less that step's seconds) to its last step's log."""
    from mlflow.tracking import MlflowClient

    history = sorted(
        MlflowClient(tracking_uri=result["tracking_uri"]).get_metric_history(result["mlflow_run_id"], "time/step_s"), key=lambda m: m.step
    )
    return history[0].timestamp / 1000 - history[0].value, history[-1].timestamp / 1000
