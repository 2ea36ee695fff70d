"""scripts/gpu_smoke.sh where there is no GPU: its checks, its `--dry-run` (the GSM8K run's data
and tiny model made, then the exact job it would start, resolved by `python -m rlsvc.train
--dry-run`), and its report (scripts/gpu_smoke_report.py), which fails a GSM8K run that finished
without its reasoning or final-evaluation metrics. The jobs themselves need a GPU machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_gpu_configs import fake_nvidia_smi, path_without_nvidia_smi

from rlsvc.config import Config

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts/gpu_smoke.sh"
sys.path.insert(0, str(REPO / "scripts"))
import gpu_smoke_report  # noqa: E402


def smoke(tmp_path: Path, gpus: int | None, *args: str) -> subprocess.CompletedProcess:
    """The script with `gpus` GPUs listed by a stand-in nvidia-smi (None: no nvidia-smi at all)."""
    lines = "; ".join(f"echo 'GPU {i}: NVIDIA H100 (UUID: GPU-{i})'" for i in range(gpus or 0))
    first = [fake_nvidia_smi(tmp_path / "bin", lines or "true")] if gpus is not None else []
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env |= {"PATH": path_without_nvidia_smi(*first), "TMPDIR": str(tmp_path), "PYTHON": sys.executable, "PYTHONPATH": str(REPO)}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300)


def planned_jobs(stdout: str) -> dict[str, Config]:
    """Each dry-run job's resolved config, by run name, from the script's output."""
    jobs = {}
    for part in stdout.split("gpu_smoke: ")[1:]:
        name, _, rest = part.partition(":")
        if "would run:" in rest:
            printed = rest.split("\n", 1)[1].split("rlsvc placement plan (")[0]
            jobs[name] = Config.model_validate(yaml.safe_load(printed.rsplit("\n", 1)[0]))
    return jobs


def test_dry_run_on_one_gpu_makes_the_data_and_a_tiny_model_and_plans_both_runs_on_a_shared_gpu(tmp_path):
    out = smoke(tmp_path, 1, "--dry-run")
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = planned_jobs(out.stdout)
    assert set(jobs) == {"blackjack", "gsm8k"}
    bj, gsm = jobs["blackjack"], jobs["gsm8k"]
    assert bj.run.name == "blackjack_qwen3_1.7b" and bj.run.steps == 5 and bj.model.path == "Qwen/Qwen3-1.7B"
    assert gsm.run.name == "gsm8k_qwen3_1.7b" and gsm.run.steps == 3 and gsm.env.type == "reasoning"
    for cfg in (bj, gsm):  # three policy roles on one GPU
        assert (cfg.trainer.num_ranks, cfg.trainer.num_gpus, cfg.rollout.num_gpus) == (1, 0.3, 0.3)
        assert cfg.run.time_budget_minutes is None and cfg.run.checkpoint_every == 0
    assert "the config asks for 4" in out.stdout
    # the GSM8K run: generated problems in GSM8K's schema, a tiny Qwen3 made here, no hub id
    model = Path(gsm.model.path)
    assert model.is_relative_to(tmp_path) and json.loads((model / "config.json").read_text())["model_type"] == "qwen3"
    assert gsm.eval.episodes == 32 and gsm.eval.every_steps == 0
    for split, n in (("train", 256), ("test", 32)):
        rows = [json.loads(line) for line in Path(getattr(gsm.env.data, split)).read_text().splitlines()]
        assert len(rows) == n and all("<<" in r["answer"] and "\n#### " in r["answer"] for r in rows)
    assert not list(tmp_path.glob("*/*/runs")), "a dry run wrote a run folder"


def test_a_model_folder_serves_the_gsm8k_run_and_four_gpus_keep_the_config_shape(tmp_path):
    from rlsvc.models.make_tiny_hf import make_tiny_hf

    folder = make_tiny_hf("qwen3", tmp_path / "qwen3", max_position=2048)
    out = smoke(tmp_path, 4, "--only", "gsm8k", "--dry-run", str(folder), "grpo.groups_per_step=4")
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = planned_jobs(out.stdout)
    assert set(jobs) == {"gsm8k"}
    gsm = jobs["gsm8k"]
    assert gsm.model.path == str(folder) and gsm.grpo.groups_per_step == 4  # overrides applied last
    assert (gsm.trainer.num_ranks, gsm.trainer.num_gpus, gsm.rollout.num_gpus) == (2, 1, 1) and "0.3 GPU" not in out.stdout
    assert not list(tmp_path.glob("rlsvc-gpu-smoke.*/gsm8k/tiny_qwen3"))


@pytest.mark.parametrize(
    ("gpus", "args", "message"),
    [
        (None, [], "gpu_smoke: no nvidia-smi on PATH: this needs a machine with NVIDIA GPUs and their driver"),
        (0, [], "gpu_smoke: nvidia-smi lists no GPU on this machine"),
        (1, ["--only", "math"], "gpu_smoke: --only takes blackjack or gsm8k"),
        (1, ["no/such/folder"], "gpu_smoke: model folder not found: no/such/folder"),
        (1, ["--only", "gsm8k", "--dry-run", "grpo.group_size=zero"], "gpu_smoke: config error: grpo.group_size"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, gpus, args, message):
    out = smoke(tmp_path, gpus, *args)
    assert out.returncode == 2 and out.stderr.startswith(message) and out.stderr.count("\n") == 1, out.stderr


def reasoning_history(steps: int, with_eval: bool) -> dict[str, dict[int, float]]:
    history = {key: {s: 0.1 * s for s in range(1, steps + 1)} for _, key in gpu_smoke_report.TIMING_ROWS}
    history["sync/total_s"][0] = 0.5
    history |= {key: {s: 0.25 for s in range(1, steps + 1)} for key in gpu_smoke_report.REASONING_STEP_METRICS}
    if with_eval:
        history |= {f"eval/{k}": {steps: 0.5} for k in gpu_smoke_report.EVAL_METRICS}
    return history


RESULT = {"steps": 3, "startup_s": 40.0, "train_s": 30.0, "episodes_per_s": 10.7, "total_s": 80.0}
FINAL = {"episodes": 32, "strict_accuracy": 0.5, "lenient_accuracy": 0.5, "format_rate": 0.5}


def test_the_report_names_each_missing_reasoning_or_evaluation_metric():
    lines, missing = gpu_smoke_report.summary({**RESULT, "eval": FINAL}, reasoning_history(3, True), "gsm8k", reasoning=True)
    assert missing == [] and "final greedy evaluation on 32 test problems: strict_accuracy 0.500" in lines[-1]
    history = reasoning_history(3, False)
    del history["format_rate"]
    _, missing = gpu_smoke_report.summary({**RESULT, "eval": FINAL}, history, "gsm8k", reasoning=True)
    assert missing == ["format_rate", "eval/strict_accuracy", "eval/lenient_accuracy", "eval/format_rate"]
    _, missing = gpu_smoke_report.summary(RESULT, reasoning_history(3, True), "gsm8k", reasoning=True)  # no result["eval"]
    assert missing == [f"eval/{k}" for k in gpu_smoke_report.EVAL_METRICS]
    _, missing = gpu_smoke_report.summary(RESULT, {}, "blackjack", reasoning=False)  # nothing required of blackjack
    assert missing == []


@pytest.mark.parametrize("with_eval", [True, False])
def test_the_report_reads_the_run_from_mlflow_and_fails_without_the_evaluation(tmp_path, capsys, with_eval):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("smoke"))
    for key, values in reasoning_history(3, with_eval).items():
        for step, value in values.items():
            client.log_metric(run.info.run_id, key, value, step=step)
    client.set_terminated(run.info.run_id)
    (tmp_path / "runs" / "job").mkdir(parents=True)
    result = {**RESULT, "eval": FINAL, "tracking_uri": uri, "mlflow_run_id": run.info.run_id}
    (tmp_path / "runs" / "job" / "result.json").write_text(json.dumps(result))
    rc = gpu_smoke_report.main([str(tmp_path / "runs"), "--label", "gsm8k", "--reasoning"])
    captured = capsys.readouterr()
    assert "strict_accuracy" in captured.out and "start-up 40.0 s" in captured.out
    if with_eval:
        assert rc == 0 and "final greedy evaluation on 32 test problems" in captured.out
    else:
        missing = "eval/strict_accuracy, eval/lenient_accuracy, eval/format_rate"
        assert rc == 1 and captured.err.endswith(f"\ngpu_smoke: gsm8k: the run finished without logging {missing}\n")
