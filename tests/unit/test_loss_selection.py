"""`grpo.loss` and the DAPO options in the config, and the trainer's loss under each: the config
rejects contradictory combinations in one line (exit 2 from the CLI), fills in what a loss
implies, and the trainer's step computes exactly the variant's own function
(rlsvc/algo/variants.py) on a hand-made batch; the default stays the recorded GRPO baseline."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch
from test_loss_baseline import episodes

from rlsvc.algo.grpo import LossSettings, policy_loss
from rlsvc.algo.variants import dr_grpo_loss, gspo_loss
from rlsvc.config import Config, ConfigError, load_config
from rlsvc.models.titan import ModelConfig
from rlsvc.models.tokenizer import PAD_ID
from rlsvc.trainer.batch import TrainBatch, build_batch
from rlsvc.trainer.titan_trainer import TitanReference, TitanTrainer, TrainerSpec


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["grpo.loss=dr_grpo", "grpo.normalize_std=true"], "normalize_std=true contradicts loss=dr_grpo"),
        (["grpo.loss=dr_grpo", "grpo.normalization=sequence"], "normalization=sequence contradicts loss=dr_grpo"),
        (["grpo.loss=gspo", "grpo.normalization=sequence"], "normalization=sequence contradicts loss=gspo"),
        (["grpo.loss=gspo", "grpo.tis_cap=2.0"], "tis_cap is not available with loss=gspo"),
        (["grpo.overlong_penalty=0.5"], "overlong_penalty has no effect without overlong_buffer"),
        (["grpo.max_sampling_rounds=5"], "max_sampling_rounds has no effect without dynamic_sampling"),
        (["rollout.max_tokens=8", "grpo.overlong_buffer=9"], "grpo.overlong_buffer (9) must be at most rollout.max_tokens (8)"),
        (["grpo.loss=ppo"], "grpo.loss"),
    ],
)
def test_contradictory_settings_are_one_line_errors(overrides: list[str], says: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_the_cli_refuses_a_contradiction_with_exit_2_before_anything_starts() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rlsvc.train", "--dry-run", "grpo.loss=dr_grpo", "grpo.normalize_std=true"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0 and "grpo" in out.stderr and "dr_grpo" in out.stderr


def test_what_each_loss_implies_is_filled_in_and_a_resolved_config_validates_again() -> None:
    assert load_config(None, ["grpo.loss=dr_grpo"]).grpo.normalize_std is False
    gspo = load_config(None, ["grpo.loss=gspo"]).grpo
    assert (gspo.clip_eps, gspo.clip_eps_high) == (3e-4, 4e-4)  # the paper's range
    own = load_config(None, ["grpo.loss=gspo", "grpo.clip_eps=0.01"]).grpo
    assert (own.clip_eps, own.clip_eps_high) == (0.01, None)  # a range the config gives is its own
    default = load_config().grpo
    assert (default.loss, default.normalize_std, default.clip_eps, default.dynamic_sampling, default.mask_truncated) == (
        "grpo",
        True,
        0.2,
        False,
        False,
    )
    for overrides in (
        ["grpo.loss=dr_grpo"],
        ["grpo.loss=gspo", "grpo.dynamic_sampling=true", "grpo.max_sampling_rounds=4"],
        ["rollout.max_tokens=8", "grpo.overlong_buffer=4", "grpo.overlong_penalty=0.5", "grpo.mask_truncated=true"],
    ):
        cfg = load_config(None, overrides)
        assert Config.model_validate(cfg.model_dump(mode="json")) == cfg  # the job hashes the resolved config


def test_the_default_config_gives_the_settings_of_the_recorded_baseline() -> None:
    """tests/unit/test_loss_baseline.py holds the losses of these settings: the default `grpo`
    path builds exactly them (no budget, kind grpo), so it computes what it computed before."""
    cfg = load_config(None, ["grpo.clip_eps_high=0.28", "grpo.kl_coef=0.1", "grpo.tis_cap=2.0", "rollout.max_tokens=5"])
    spec = TrainerSpec.from_config(ModelConfig(), cfg, None)
    assert spec.loss == LossSettings(clip_eps=0.2, clip_eps_high=0.28, kl_coef=0.1, tis_cap=2.0)
    dr = TrainerSpec.from_config(ModelConfig(), load_config(None, ["grpo.loss=dr_grpo", "rollout.max_tokens=5"]), None).loss
    assert (dr.kind, dr.max_response_tokens, dr.clip_eps) == ("dr_grpo", 5, 0.2)
    with pytest.raises(ValueError, match="max_response_tokens"):
        LossSettings(kind="dr_grpo")


@pytest.fixture
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def hand_made_batch(trainer: TitanTrainer) -> tuple[TrainBatch, torch.Tensor]:
    """The baseline's eight episodes, the behaviour logprobs moved off the trainer's own so
    ratios differ from 1 (some clip), and the trainer's logprobs before the step."""
    batch = build_batch(episodes(), PAD_ID, "token")
    before = trainer.logprobs(batch.input_ids, None, batch.lengths)
    shift = torch.linspace(-0.3, 0.3, batch.input_ids.numel()).reshape(batch.input_ids.shape)
    batch.old_logprobs = torch.where(batch.loss_mask > 0, before + shift, torch.zeros_like(before))
    return batch, before


def step_loss(settings: LossSettings, micro_batch_tokens: int = 16384, reference: bool = False) -> tuple[float, torch.Tensor, TrainBatch]:
    cfg = ModelConfig()
    trainer = TitanTrainer(cfg, lr=1e-3, device="cpu", seed=3, loss=settings, micro_batch_tokens=micro_batch_tokens)
    batch, before = hand_made_batch(trainer)
    if reference:
        batch.ref_logprobs = TitanReference(cfg, device="cpu", seed=4).logprobs(batch.input_ids, None, batch.lengths)
    return trainer.train_step(batch)["loss"], before, batch


def test_the_trainer_with_loss_gspo_computes_variants_gspo_loss(one_thread: None) -> None:
    settings = LossSettings(clip_eps=3e-2, clip_eps_high=4e-2, kind="gspo")
    loss, before, batch = step_loss(settings)
    want, _ = gspo_loss(before, batch.old_logprobs, batch.advantages, batch.loss_mask, clip_eps=3e-2, clip_eps_high=4e-2)
    grpo, _ = policy_loss(before, batch.old_logprobs, batch.advantages, batch.loss_mask, LossSettings(clip_eps=3e-2, clip_eps_high=4e-2))
    assert loss == pytest.approx(float(want), rel=1e-5) and abs(float(want) - float(grpo)) > 1e-3  # not grpo's number
    # micro-batches divide by the whole batch's row count: the same loss in three passes
    assert step_loss(settings, micro_batch_tokens=40)[0] == pytest.approx(loss, rel=1e-5)


def test_the_trainer_with_loss_dr_grpo_computes_variants_dr_grpo_loss(one_thread: None) -> None:
    settings = LossSettings(clip_eps=0.2, kl_coef=0.1, kind="dr_grpo", max_response_tokens=4)
    loss, before, batch = step_loss(settings, reference=True)
    want, _ = dr_grpo_loss(
        before, batch.old_logprobs, batch.advantages, batch.loss_mask, max_response_tokens=4, kl_coef=0.1, ref_logprobs=batch.ref_logprobs
    )
    grpo, _ = policy_loss(
        before, batch.old_logprobs, batch.advantages, batch.loss_mask, LossSettings(kl_coef=0.1), ref_logprobs=batch.ref_logprobs
    )
    assert loss == pytest.approx(float(want), rel=1e-5) and abs(float(want) - float(grpo)) > 1e-4
    assert step_loss(settings, micro_batch_tokens=40, reference=True)[0] == pytest.approx(loss, rel=1e-5)


def test_the_trainer_with_loss_grpo_computes_policy_loss(one_thread: None) -> None:
    loss, before, batch = step_loss(LossSettings(clip_eps=0.2, clip_eps_high=0.28))
    want, _ = policy_loss(before, batch.old_logprobs, batch.advantages, batch.loss_mask, LossSettings(clip_eps=0.2, clip_eps_high=0.28))
    assert loss == pytest.approx(float(want), rel=1e-5)
