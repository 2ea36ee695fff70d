"""The reasoning task end to end: a GSM8K-schema file (calculator annotations `<<...>>`, answers
ending `#### N`; tests/e2e/gsm8k_rows.py) trains configs/math_tiny.yaml for 4 steps through
`python -m rlsvc.train` (real Ray actors, vLLM, TorchTitan, math-verify rewards and MLflow), in
the synchronous loop and in the asynchronous one. Each step logs the reasoning metrics (strict
and lenient accuracy, format rate, malformed count) and the loop's (zero-variance group rate,
response lengths). The test split is evaluated (`eval.test_every_steps`) before the first step
and every 2 steps through the vLLM rollout workers. The
eval/test metrics are in MLflow at steps 0, 2 and 4 and in result.json; the greedy accuracy
logged is the one an independent strict rule gives the greedy answers the job wrote
(test_eval.jsonl); for the weights saved it is the accuracy the final evaluation (`transformers`,
the same problems) reports. The asynchronous run keeps the weights of the best test greedy
accuracy (`eval.select_on_test`), the synchronous one the last."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LEAN_JOB
from gsm8k_rows import gsm8k_rows

pytestmark = [pytest.mark.e2e, pytest.mark.concurrent]
REPO = Path(__file__).resolve().parents[2]
STEPS, EVERY, K = 4, 2, 3
EVALUATED = [0, 2, 4]  # the start point, then every EVERY steps
CURVES = ("greedy_accuracy", "lenient_accuracy", "mean_at_k", "pass_at_k")


def strict_right(text: str, final: str) -> bool:
    """GSM8K's rule, written here on its own: the last '#### N' line's number equals the reference."""
    found = re.findall(r"^####\s*(-?[\d,]*\.?\d+)\s*$", text, flags=re.MULTILINE)
    return bool(found) and float(found[-1].replace(",", "")) == float(final)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_the_test_split_is_evaluated_through_the_engines_during_training(tmp_path: Path, mlflow_uri: str, asynchronous: bool):
    test_rows = gsm8k_rows(100, 8)
    for split, rows in (("train", gsm8k_rows(0, 40)), ("test", test_rows)):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    uri = mlflow_uri
    cmd = [
        *(sys.executable, "-m", "rlsvc.train", "--config", str(REPO / "configs/math_tiny.yaml")),
        *("env.data.train=train.jsonl", "env.data.test=test.jsonl"),
        *(f"run.steps={STEPS}", f"run.output_dir={tmp_path / 'runs'}", f"tracking.tracking_uri={uri}", "eval.episodes=8", *LEAN_JOB),
        *(f"eval.test_every_steps={EVERY}", f"eval.test_samples={K}", f"rollout.asynchronous={str(asynchronous).lower()}"),
        *(["eval.select_on_test=true"] if asynchronous else []),
    ]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    run_dir = next((tmp_path / "runs").glob("*/result.json")).parent
    result = json.loads((run_dir / "result.json").read_text())

    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    history = {
        name: {m.step: m.value for m in client.get_metric_history(result["mlflow_run_id"], f"eval/test/{name}")}
        for name in (*CURVES, *(f"{c}_stderr" for c in CURVES), "seconds", "problems", "samples")
    }
    for name, points in history.items():
        assert sorted(points) == EVALUATED, (name, points)
    check_step_metrics(client, result)
    assert set(history["problems"].values()) == {8.0} and set(history["samples"].values()) == {float(K)}
    for step in EVALUATED:
        assert 0.0 <= history["greedy_accuracy"][step] <= history["lenient_accuracy"][step] <= 1.0
        assert 0.0 <= history["mean_at_k"][step] <= history["pass_at_k"][step] <= 1.0
        assert history["seconds"][step] > 0
    curves = result["test_eval"]
    assert curves["steps"] == EVALUATED and curves["greedy_accuracy"] == [history["greedy_accuracy"][s] for s in EVALUATED]
    assert curves["last"]["pass_at_k"] == history["pass_at_k"][4] and curves["last"]["seconds"] == history["seconds"][4]

    # the greedy answers the job scored, scored again here by a rule of this test's own
    records = [json.loads(line) for line in (run_dir / "test_eval.jsonl").read_text().splitlines()]
    finals = [r["answer"].rsplit("#### ", 1)[1] for r in test_rows]
    for step in EVALUATED:
        at = sorted((r for r in records if r["step"] == step), key=lambda r: r["index"])
        assert [r["index"] for r in at] == list(range(8)) and all(r["samples"] == K for r in at)
        mine = sum(strict_right(r["greedy"], finals[r["index"]]) for r in at) / 8
        assert mine == history["greedy_accuracy"][step] == sum(r["strict"] for r in at) / 8
    # the weights saved: the last, or the first best by test greedy accuracy; the final evaluation's
    # greedy answers (transformers) of them score the same
    greedy = history["greedy_accuracy"]
    saved = max(EVALUATED, key=lambda s: (greedy[s], -s)) if asynchronous else STEPS
    assert result["saved_version"] == saved
    assert abs(result["eval"]["strict_accuracy"] - greedy[saved]) <= 0.02


def check_step_metrics(client, result: dict) -> None:
    """The task's and the loop's metrics, every step; the final evaluation's in result.json."""
    run = client.get_run(result["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.params["env.type"] == "reasoning" and result["steps"] == STEPS
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
    metrics, final = run.data.metrics, result["eval"]
    assert 0 < metrics["response_len_mean"] <= metrics["response_len_max"] <= 48  # rollout.max_tokens
    assert final["episodes"] == 8 and 0.0 <= final["strict_accuracy"] <= final["lenient_accuracy"] <= 1.0
    assert metrics["eval/strict_accuracy"] == final["strict_accuracy"]
