"""The end of a job: once the final policy is saved, the actors stop (engines and process groups
closed, CPUs and GPUs back to the cluster), and then the local cluster the job started shuts
down, while the driver evaluates the saved policy, not after (`finish` in rlsvc/job/finish.py). The job's
task (tests/e2e/job_end/stop_probe.py, BlackJack) waits in its final evaluation, at most 90 s,
until Ray lists none of the job's named actors and the driver is no longer connected; were they
stopped only after the evaluation, it would find them all still there when its wait ran out.
Its validation, in training, counts them too, so an empty list cannot pass by looking elsewhere.
The job runs with `tracking.log_model=false`: its end logs the checkpoint but no MLflow model.
The driver's start-up heap is frozen during start-up: the count is logged with `startup_s`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
PROBE = Path(__file__).with_name("job_end")


def test_actors_stop_while_the_saved_policy_is_evaluated(tmp_path, mlflow_uri):
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "disabled",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROBE), os.environ.get("PYTHONPATH")])),
    }
    uri = mlflow_uri
    cmd = [
        sys.executable,
        "-m",
        "rlsvc.train",
        "env.task=stop_probe:make",
        "model.titan.tokenizer=blackjack",  # the probe plays BlackJack (a plug-in's default tokenizer is bytes)
        "run.steps=2",
        "eval.every_steps=1",
        "eval.episodes=1000",
        f"run.output_dir={tmp_path / 'runs'}",
        f"tracking.tracking_uri={uri}",
        "tracking.log_model=false",
    ]
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    result = json.loads(next((tmp_path / "runs").glob("*/result.json")).read_text())
    evaluation = result["eval"]
    # the probe saw the job's actors while it trained (so it looks where they are), and saw them
    # go during the final evaluation
    assert evaluation["probe_actors_in_training"] >= 5, evaluation
    assert evaluation["probe_actors_left"] == 0, evaluation
    assert evaluation["probe_cluster_up"] == 0, evaluation  # the job's own cluster went down meanwhile too
    assert -1.0 <= evaluation["mean_return"] <= 1.0 and result["steps"] == 2
    # tracking.log_model=false: the checkpoint is the run's artifact, with no MLflow model beside it
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    # the driver froze its start-up heap during start-up, before startup_s was taken
    # (rlsvc/heap.py): torch, Ray and MLflow alone leave far more than 100k objects
    (frozen,) = client.get_metric_history(result["mlflow_run_id"], "startup/frozen_objects")
    assert frozen.value > 100_000 and frozen.step == 0, frozen
    artifacts = {a.path for a in client.list_artifacts(result["mlflow_run_id"])}
    assert result["mlflow_model_uri"] is None and "checkpoint" in artifacts and "policy" not in artifacts, artifacts
    assert "not logged (tracking.log_model=false)" in " ".join(out.stdout.split())
