"""A GRPO job on a pretrained Hugging Face checkpoint of each family (Qwen3, Llama 3, Qwen2; tiny
random folders written by rlsvc.models.make_tiny_hf), through `python -m rlsvc.train` and Ray:
single-turn BlackJack with chat prompts and tagged answers, and the multi-turn code task with
each episode one token sequence. The trainer loads the folder into TorchTitan, vLLM serves it,
weights sync by their Hugging Face names (vLLM's logprobs match the trainer's), and the saved
policy is a Hugging Face folder that `transformers` loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LEAN_JOB

pytestmark = [pytest.mark.e2e, pytest.mark.concurrent]
REPO = Path(__file__).resolve().parents[2]
STEPS = 3

COMMON = [
    f"run.steps={STEPS}",
    "run.checkpoint_every=0",
    "grpo.groups_per_step=4",
    "grpo.group_size=4",
    "env.sessions_per_actor=16",
    "model.warm_start_steps=2",
    "grpo.kl_coef=0.0",  # no reference actor: 3 steps do not need one (tests/integration covers it)
]
TASKS = {
    # single-turn: the policy's first decision, then stick-at-17 plays the hand out
    "blackjack": ["env.then_stick_at=17", "eval.every_steps=1", "eval.episodes=500", "eval.val_episodes=500"],
    "code": [
        "env.type=code",
        "env.chat=true",
        "env.max_turns=3",
        "env.code.exec_timeout_s=5",
        "model.max_seq_len=512",
        "model.warm_start_steps=0",
        "rollout.max_tokens=24",
        "eval.every_steps=0",
        "eval.episodes=0",
    ],
}


# every family once, and both tasks: the code task on the two chat templates (ChatML: Qwen3 and
# Qwen2 share it; Llama 3's), which decide how a later turn's reply is appended; BlackJack on the
# third family. (A job takes minutes on two cores; each family's TorchTitan adapter is also checked
# against transformers without a job: tests/unit/test_hf_titan.py.)
JOBS = [("blackjack", "qwen2"), ("code", "qwen3"), ("code", "llama")]


@pytest.mark.parametrize(("task", "family"), JOBS)
def test_a_grpo_job_on_a_pretrained_checkpoint(family: str, task: str, tmp_path: Path, mlflow_uri: str):
    from mlflow.tracking import MlflowClient

    uri = mlflow_uri
    cmd = [
        sys.executable,
        "-m",
        "rlsvc.train",
        "--config",
        str(REPO / "configs/blackjack_hf_tiny.yaml"),
        f"model.path=tiny:{family}",
        f"run.output_dir={tmp_path / 'runs'}",
        f"tracking.tracking_uri={uri}",
        *COMMON,
        *LEAN_JOB,
        *TASKS[task],
    ]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    result = json.loads(next((tmp_path / "runs").glob("*/result.json")).read_text())
    assert result["steps"] == STEPS

    client = MlflowClient(uri)
    run = client.get_run(result["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.params["model.source"] == "hf"
    for name in (
        "return_mean",
        "loss",
        "logprob_mismatch",
        "sync/total_s",
        "truncated_rate",
        *(("invalid_rate",) if task == "blackjack" else ()),
    ):
        assert len(client.get_metric_history(run.info.run_id, name)) >= STEPS, name
    metrics = run.data.metrics
    # the engine sampled with the weights the trainer scores: only float noise between the two
    assert metrics["logprob_mismatch"] < 1e-3 and metrics["train_skipped"] == 0

    checkpoint = Path(result["checkpoint"])
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["model_type"] == family and (checkpoint / "model.safetensors").is_file()
    meta = json.loads((checkpoint / "rlsvc.json").read_text())
    assert meta["prompt"] == f"{task}/chat-v1" and meta["policy_version"] == result["saved_version"]  # the best validated
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(str(checkpoint))
    assert AutoTokenizer.from_pretrained(str(checkpoint)).chat_template
    # the training checkpoint after the last step holds the policy as a Hugging Face folder too
    [policy] = [p.parent for p in (checkpoint.parent / "checkpoints").glob(f"*{STEPS}*/policy/config.json")]
    AutoModelForCausalLM.from_pretrained(str(policy))
    assert json.loads((policy / "rlsvc.json").read_text())["prompt"] == meta["prompt"]
    if task == "blackjack":
        from rlsvc.envs.blackjack import HandView
        from rlsvc.eval import load_policy

        assert set(load_policy(checkpoint).act([HandView(12, 10, False), HandView(20, 5, True)])) <= {"hit", "stand"}
        assert -1.0 <= result["eval"]["mean_return"] <= 1.0
    else:
        assert metrics["turns_per_episode"] > 1  # random code runs and fails: episodes go on
