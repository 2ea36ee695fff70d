"""`rlsvc sft` end to end on a local Ray cluster (issue 57's supervised stage): two FSDP2 trainer
ranks as Ray actors fine-tune a tiny Qwen3 checkpoint on generated problems; the Hugging Face
folder it writes reloads with `transformers`, and an independent greedy evaluation of it (one
problem at a time, its own prompt encoding and its own strict rule) agrees with what the job
reported and logged to MLflow."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO, mlflow_store

pytestmark = [pytest.mark.integration, pytest.mark.concurrent]

TRAIN, EPOCHS, EVAL_PROBLEMS, MAX_NEW = 400, 3, 40, 120


def own_strict_answer(text: str) -> int | None:
    found = re.findall(r"####\s*(-?\d+)", text)
    return int(found[-1]) if found else None


@pytest.fixture(scope="module")
def job(tmp_path_factory, mlflow_template):
    from rlsvc.models.make_tiny_hf import make_tiny_hf
    from rlsvc.reasoning.generate import LEVELS, generate, write

    tmp = tmp_path_factory.mktemp("sft_job")
    write(generate(TRAIN, EVAL_PROBLEMS, d=LEVELS["easy"]), tmp / "data")
    make_tiny_hf("qwen3", tmp / "start", seed=1)
    uri = mlflow_store(mlflow_template, tmp)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"PYTHONPATH": str(REPO)}
    args = [
        f"data.path={tmp}/data",
        f"model.path={tmp}/start",
        f"run.output_dir={tmp}/runs",
        "run.name=short",
        f"sft.epochs={EPOCHS}",
        "sft.tokens_per_batch=2048",  # about 40 steps an epoch: enough to learn the format
        "trainer.num_ranks=2",
        "trainer.num_cpus=1",
        "trainer.lr=0.003",
        f"eval.problems={EVAL_PROBLEMS}",
        f"eval.max_new_tokens={MAX_NEW}",
        f"tracking.tracking_uri={uri}",
        "tracking.system_metrics_interval_s=null",
        "cluster.include_dashboard=false",
    ]
    proc = subprocess.run([sys.executable, "-m", "rlsvc.sft", *args], cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return tmp, json.loads((tmp / "runs/short/result.json").read_text())


def test_the_job_trains_on_two_ranks_and_reports_each_epoch(job):
    tmp, result = job
    assert [e["epoch"] for e in result["epochs"]] == list(range(1, EPOCHS + 1)) and result["examples"] == TRAIN and result["skipped"] == 0
    assert all(e["accuracy"] is not None and e["stderr"] is not None for e in result["epochs"])
    assert result["epochs"][-1]["loss"] < result["epochs"][0]["loss"] / 2
    assert result["model_dir"] == str(tmp / "runs/short/model")


def test_mlflow_holds_params_the_loss_curve_and_the_accuracy(job):
    from mlflow.tracking import MlflowClient

    tmp, result = job
    client = MlflowClient(f"sqlite:///{tmp}/mlflow.db")
    run = client.get_run(result["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.params["sft.epochs"] == str(EPOCHS) and run.data.params["trainer.num_ranks"] == "2"
    losses = client.get_metric_history(run.info.run_id, "sft/loss")
    assert len(losses) == result["epochs"][-1]["steps"]
    accuracy = sorted(client.get_metric_history(run.info.run_id, "eval/test/accuracy"), key=lambda m: m.step)
    assert [m.value for m in accuracy] == [e["accuracy"] for e in result["epochs"]]
    assert run.data.metrics["eval/test/accuracy_stderr"] == pytest.approx(result["epochs"][-1]["stderr"])


def test_the_written_folder_reloads_and_scores_as_the_job_reported(job):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlsvc.reasoning.prompts import PromptTemplate

    tmp, result = job
    folder = result["model_dir"]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    rows = [json.loads(line) for line in (tmp / "data/test.jsonl").read_text().splitlines()][:EVAL_PROBLEMS]
    reported = [json.loads(line) for line in (tmp / f"runs/short/eval_epoch{EPOCHS}.jsonl").read_text().splitlines()]
    own = []
    for row in rows:  # one at a time: no padding, no batching
        ids = tokenizer.encode(PromptTemplate().render(row["question"]), add_special_tokens=False, return_tensors="pt")
        out = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        own.append(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))
    right = [own_strict_answer(c) == int(row["answer"].rsplit("#### ", 1)[1]) for c, row in zip(own, rows, strict=True)]
    assert abs(sum(right) / len(right) - result["epochs"][-1]["accuracy"]) <= 0.02 + 1e-9
    same = sum(a == r["completion"] for a, r in zip(own, reported, strict=True))
    assert same >= len(rows) - 1, [(a, r["completion"]) for a, r in zip(own, reported) if a != r["completion"]][:2]
    assert sum("####" in c for c in own) >= len(own) // 2  # the format was learned: the checks above compare real answers
