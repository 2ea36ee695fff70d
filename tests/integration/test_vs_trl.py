"""TRL's side of benchmarks/vs_trl.py runs: GRPOTrainer trains the tiny policy on single-turn
BlackJack from an rlsvc HF folder, with rlsvc's prompt token ids and validation (a few steps;
the comparison itself is `python -m benchmarks.vs_trl`)."""

from __future__ import annotations

import argparse

import pytest
import torch

pytestmark = [pytest.mark.integration, pytest.mark.concurrent]


def test_trl_grpo_trainer_trains_on_the_shared_task(tmp_path) -> None:
    from safetensors.torch import load_file

    from benchmarks.vs_trl import run_trl
    from rlsvc.config import load_config
    from rlsvc.loop import warm_start_batches
    from rlsvc.models.hf_export import WEIGHTS_FILE, save_hf_checkpoint
    from rlsvc.models.tokenizer import build_tokenizer
    from rlsvc.policy_io import TaskCodec
    from rlsvc.tasks.blackjack import BlackjackTask
    from rlsvc.trainer.titan_trainer import TitanTrainer

    job = load_config(None, [])
    cfg = job.model.titan
    # rlsvc's format warm start, in process: the policy answers HIT or STAND, so rewards vary
    trainer = TitanTrainer(cfg, lr=job.trainer.lr, seed=job.run.seed, device="cpu")
    for ids, mask in warm_start_batches(
        TaskCodec(BlackjackTask(), build_tokenizer("blackjack")), job.run.seed, job.model.warm_start_steps, 256
    ):
        trainer.sft_step(ids, mask)
    start = save_hf_checkpoint(tmp_path / "start", trainer.hf_state_dict(), cfg)
    args = argparse.Namespace(steps=2, prompts=4, group_size=4, eval_every=1, val_episodes=200, final_episodes=200)
    row = run_trl(args, start, tmp_path)  # asserts TRL tokenises the prompts to rlsvc's ids
    assert row["val_steps"] == [1, 2] and all(-1.0 <= r <= 1.0 for r in row["val_returns"])
    assert row["samples_per_s"] > 0 and -1.0 <= row["final_return"] <= 1.0
    before, after = load_file(str(start / WEIGHTS_FILE)), load_file(str(tmp_path / "trl-final" / WEIGHTS_FILE))
    assert any(not torch.equal(before[k], after[k]) for k in before), "TRL's optimiser steps changed no weight"
