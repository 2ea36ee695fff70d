"""A GSM8K-schema file (calculator annotations `<<...>>`, answers ending `#### N`) trains
configs/math_tiny.yaml for 3 steps through `python -m rlsvc.train`: real Ray actors, vLLM,
TorchTitan, math-verify rewards and MLflow. The run finishes, logs the reasoning metrics (strict
and lenient accuracy, format rate, malformed count) and the loop's (zero-variance group rate,
response lengths), and its result holds the greedy test-split accuracy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
STEPS = 3
TEMPLATES = [  # GSM8K's own style: spaces around '=', an annotation per step, '#### N' last
    ("{a} has {x} apples and buys {y} more. How many apples does {a} have?", "{a} has {x} + {y} = <<{x}+{y}={s}>>{s} apples.\n#### {s}"),
    ("{a} reads {x} pages a day for {y} days. How many pages does {a} read?", "{a} reads {x} * {y} = <<{x}*{y}={p}>>{p} pages.\n#### {p}"),
]


def gsm8k_rows(start: int, n: int) -> list[dict[str, str]]:
    rows = []
    for i in range(start, start + n):
        question, answer = TEMPLATES[i % 2]
        values = {"a": ("Ann", "Tom", "Mia")[i % 3], "x": 2 + i, "y": 3 + i % 5, "s": 5 + i + i % 5, "p": (2 + i) * (3 + i % 5)}
        rows.append({"question": question.format(**values), "answer": answer.format(**values)})
    return rows


def test_a_gsm8k_schema_file_trains_three_steps_and_reports_test_accuracy(tmp_path: Path):
    for split, rows in (("train", gsm8k_rows(0, 40)), ("test", gsm8k_rows(100, 8))):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cmd = [
        *(sys.executable, "-m", "rlsvc.train", "--config", str(REPO / "configs/math_tiny.yaml")),
        *("env.data.train=train.jsonl", "env.data.test=test.jsonl"),  # relative: resolved in the driver
        *(f"run.steps={STEPS}", f"run.output_dir={tmp_path / 'runs'}", f"tracking.tracking_uri={uri}", "eval.episodes=8"),
    ]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    result = json.loads(next((tmp_path / "runs").glob("*/result.json")).read_text())
    assert result["steps"] == STEPS
    final = result["eval"]
    assert final["episodes"] == 8 and 0.0 <= final["strict_accuracy"] <= final["lenient_accuracy"] <= 1.0

    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    run = client.get_run(result["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.params["env.type"] == "reasoning"
    for name in (
        "strict_accuracy",
        "lenient_accuracy",
        "format_rate",
        "malformed_count",
        "zero_variance_group_rate",
        "response_len_mean",
        "response_len_max",
        "response_truncated_rate",
    ):
        assert len(client.get_metric_history(run.info.run_id, name)) == STEPS, name
    metrics = run.data.metrics
    assert 0 < metrics["response_len_mean"] <= metrics["response_len_max"] <= 48  # rollout.max_tokens
    assert metrics["eval/strict_accuracy"] == final["strict_accuracy"]
