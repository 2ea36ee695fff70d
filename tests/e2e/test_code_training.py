"""configs/code_tiny.yaml trains through Ray with both backends: the local sandbox, and the
together backend against the fake Code Interpreter on 127.0.0.1. Episodes run code, rewards come
from executing it, GRPO steps and weight syncs happen, and MLflow has the rewards; the API key
never reaches MLflow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import LEAN_JOB, mlflow_store

from rlsvc.sandbox.fake_together import FakeTogether

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
KEY = "tk-sentinel-e2e-41d2"
STEPS = 3


@pytest.fixture(scope="module")
def uri(tmp_path_factory, mlflow_template) -> str:
    """One MLflow store for both runs, so `rlsvc.compare` can put them side by side."""
    return mlflow_store(mlflow_template, tmp_path_factory.mktemp("mlflow"))


def train(tmp_path: Path, uri: str, *overrides: str, env_extra: dict | None = None) -> tuple[dict, str]:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", **(env_extra or {})}
    cmd = [
        sys.executable,
        "-m",
        "rlsvc.train",
        "--config",
        str(REPO / "configs/code_tiny.yaml"),
        f"run.steps={STEPS}",
        *LEAN_JOB,
        f"run.output_dir={tmp_path / 'runs'}",
        f"tracking.tracking_uri={uri}",
        *overrides,
    ]
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    return json.loads(next((tmp_path / "runs").glob("*/result.json")).read_text()), uri


def check_run(result: dict, uri: str) -> dict:
    from mlflow.tracking import MlflowClient

    assert result["steps"] == STEPS
    client = MlflowClient(uri)
    run = client.get_run(result["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.params["env.type"] == "code"
    tags = run.data.tags
    assert tags["rlsvc.env"] == "code" and len(tags["rlsvc.config_hash"]) == 16 and tags["rlsvc.cluster_shape"].startswith("1 node,")
    for name in ("return_mean", "solved_rate", "answered_rate", "code_turns_per_episode", "groups_dropped", "loss", "sync/total_s"):
        history = client.get_metric_history(run.info.run_id, name)
        assert len(history) >= STEPS, name  # sync/total_s also has the first sync, at step 0
    metrics = run.data.metrics
    assert metrics["turns_per_episode"] >= 1 and metrics["train_skipped"] == 0
    transcripts = [json.loads(line) for line in Path(result["checkpoint"]).parent.joinpath("transcripts.jsonl").read_text().splitlines()]
    assert transcripts and all(t["turns"][0]["obs"]["task"] in ("programming", "arithmetic") for t in transcripts)
    assert all(KEY not in str(v) for v in run.data.params.values())
    assert "reward_curve.png" in {a.path for a in client.list_artifacts(run.info.run_id)}
    return metrics


def test_code_tiny_trains_with_the_local_sandbox(tmp_path: Path, uri: str):
    result, uri = train(tmp_path, uri, "env.code.backend=local")
    check_run(result, uri)


def test_code_tiny_trains_with_together_against_the_fake_service(tmp_path: Path, uri: str):
    with FakeTogether(KEY, timeout_s=5) as url:
        result, uri = train(
            tmp_path, uri, "env.code.backend=together", f"env.code.together_base_url={url}", env_extra={"TOGETHER_API_KEY": KEY}
        )
        stats = httpx.get(url.removesuffix("/v1") + "/fake/stats", trust_env=False).json()
    check_run(result, uri)
    assert stats["executions"] >= STEPS * 32 and stats.get("unauthorized", 0) == 0  # every turn of every episode ran there
    assert KEY not in Path(result["checkpoint"]).parent.joinpath("config.yaml").read_text()


def test_compare_the_two_runs(uri: str, tmp_path: Path, run_notebook):
    """`rlsvc.compare` on the two real runs above: a table that shows the backend differs, and the PNG."""
    out = tmp_path / "compare.png"
    res = subprocess.run(
        [sys.executable, "-m", "rlsvc.compare", "--experiment", "code_tiny", "--tracking-uri", uri, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "2 runs" in res.stdout and "env.code.backend" in res.stdout and "together" in res.stdout and "local" in res.stdout
    assert KEY not in res.stdout
    assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 10_000

    # notebooks/compare_runs.ipynb on the same two runs: overview, config differences, curves, phases
    text, pngs = run_notebook("compare_runs.ipynb", {"RLSVC_NB_EXPERIMENT": "code_tiny", "MLFLOW_TRACKING_URI": uri})
    assert pngs == 1 and "2 runs" in text and "env.code.backend" in text and "together" in text and "rollout" in text
    assert KEY not in text
