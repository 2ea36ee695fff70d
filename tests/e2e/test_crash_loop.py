"""A crash loop stops the job (issue 62): with `faults.crash_on_start=reward` the reward actor
exits at every start, Ray restarts it again and again (no lifetime limit), and the job's restart
watch counts the restarts against `faults.max_actor_restarts`; one past it, the job stops with
one line naming the actor, the failures and the setting, exit 1, its MLflow run FAILED."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.concurrent]


def test_an_actor_that_dies_at_every_start_stops_the_job_within_its_budget(tmp_path, mlflow_uri):
    uri = mlflow_uri
    cmd = [sys.executable, "-m", "rlsvc.train", "run.steps=3", "faults.crash_on_start=reward", "faults.max_actor_restarts=2"]
    cmd += [f"run.output_dir={tmp_path / 'runs'}", f"tracking.tracking_uri={uri}", "eval.episodes=0"]
    out = subprocess.run(cmd, cwd=tmp_path, env={**os.environ, "RAY_AUTH_MODE": "disabled"}, capture_output=True, text=True, timeout=900)
    assert out.returncode == 1, (out.stdout + out.stderr)[-4000:]
    [line] = [ln for ln in out.stderr.splitlines() if ln.startswith("rlsvc.train: stopped:")]
    assert "rlsvc-reward (reward) failed 3 times in a row without a new completed step (faults.max_actor_restarts=2)" in line, line
    assert "last error: " in line
    assert "Traceback" not in out.stderr[-3000:]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    [run] = client.search_runs([client.get_experiment_by_name("blackjack_tiny").experiment_id])
    assert run.info.status == "FAILED"
