"""A task from outside rlsvc trains through the public interface only: the example QA task
(examples/qa_task/) selected by its `rlsvc.tasks` entry point, as a pip-installed task is, through
real Ray, vLLM, TorchTitan, OpenEnv and MLflow; no file under rlsvc/ names it. (Selecting it by
import path resolves to the same class: tests/unit/test_task_interface.py checks both.) A new
single-turn task of 25 lines written from docs/tasks.md (tests/data/last_digit_task.py) trains the
same way, and `rlsvc.eval` evaluates its saved policy as the job's final evaluation did."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import LEAN_JOB

pytestmark = [pytest.mark.e2e, pytest.mark.concurrent]
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "qa_task"
DATA = REPO / "tests" / "data"
STEPS = 2


def test_no_file_under_rlsvc_names_the_example_task():
    names = ("rlsvc_qa", "QATask", "qa_task")
    hits = [
        f"{p}: {n}"
        for p in (REPO / "rlsvc").rglob("*")
        if p.is_file() and p.suffix in (".py", ".yaml", ".json", ".jsonl", ".md")
        for n in names
        if n in p.read_text(errors="replace")
    ]
    assert not hits, hits


def entry_point_path(folder: Path) -> Path:
    """What `pip install examples/qa_task` leaves for importlib.metadata: the package's
    dist-info with its entry point (the code itself is found on PYTHONPATH)."""
    info = folder / "rlsvc_qa_task-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlsvc-qa-task\nVersion: 0.1.0\n")
    declared = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]["entry-points"]["rlsvc.tasks"]
    (info / "entry_points.txt").write_text("[rlsvc.tasks]\n" + "".join(f"{k} = {v}\n" for k, v in declared.items()))
    return folder


def train(tmp_path: Path, uri: str, pythonpath: list[str], *overrides: str) -> tuple[dict, str, dict]:
    """Run `rlsvc.train` on the example's tiny config with `overrides`: (result.json, the MLflow
    URI, the environment it ran in). `uri`: a made store (tests/conftest.py, mlflow_uri)."""
    # this checkout's rlsvc first, whatever copy is installed
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": os.pathsep.join([str(REPO), *pythonpath])}
    cmd = [sys.executable, "-m", "rlsvc.train", "--config", str(EXAMPLE / "qa_tiny.yaml"), f"run.steps={STEPS}", *LEAN_JOB]
    cmd += [f"run.output_dir={tmp_path / 'runs'}", f"tracking.tracking_uri={uri}", *overrides]
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    return json.loads(next((tmp_path / "runs").glob("*/result.json")).read_text()), uri, env


def test_the_example_task_trains_by_its_entry_point(tmp_path, mlflow_uri):
    result, uri, _ = train(
        tmp_path, mlflow_uri, [str(EXAMPLE), str(entry_point_path(tmp_path / "site"))], "eval.every_steps=1", "env.task=qa"
    )

    from mlflow.tracking import MlflowClient

    assert result["steps"] == STEPS
    # the single-turn base's evaluation of the saved policy: greedy answers to the 44 questions validation asks
    assert result["eval"]["episodes"] == 44 and 0.0 <= result["eval"]["mean_return"] <= 1.0
    client = MlflowClient(uri)
    run = client.get_run(result["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.params["env.type"] == "plugin"
    assert run.data.tags["rlsvc.env"] == "qa"
    for name in ("return_mean", "correct_rate", "wrong_rate", "loss", "eval/val_return"):
        assert len(client.get_metric_history(run.info.run_id, name)) >= STEPS, name
    metrics = run.data.metrics
    assert metrics["invalid_rate"] == 0.0  # decoding is constrained to the ten digits
    assert metrics["correct_rate"] + metrics["wrong_rate"] == 1.0 and 0.0 <= metrics["eval/val_return"] <= 1.0
    transcripts = [json.loads(line) for line in Path(result["checkpoint"]).parent.joinpath("transcripts.jsonl").read_text().splitlines()]
    assert transcripts and all(t["turns"][0]["obs"]["prompt"].endswith("=") and t["outcome"] in ("correct", "wrong") for t in transcripts)


def test_a_new_single_turn_task_trains_and_rlsvc_eval_scores_its_policy(tmp_path, mlflow_uri):
    task = "env.task=last_digit_task:LastDigitTask"
    result, uri, env = train(tmp_path, mlflow_uri, [str(DATA)], task, "env.options={}", "eval.every_steps=0", "eval.episodes=30")

    from mlflow.tracking import MlflowClient

    run = MlflowClient(uri).get_run(result["mlflow_run_id"])
    assert result["steps"] == STEPS and run.info.status == "FINISHED"
    metrics = run.data.metrics
    assert metrics["invalid_rate"] == 0.0 and metrics["correct_rate"] + metrics["wrong_rate"] == 1.0
    assert result["eval"]["episodes"] == 30 and 0.0 <= result["eval"]["mean_return"] <= 1.0
    cmd = [sys.executable, "-m", "rlsvc.eval", "--checkpoint", result["checkpoint"], "--episodes", "30"]
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == result["eval"]  # the run's config names the task; the same greedy answers
