"""The learning-rate schedule (rlsvc/trainer/lr_schedule.py, the `trainer` section's lr_schedule,
warmup_steps, decay_steps, min_lr_ratio): its shape by hand, the trainer's optimiser following it,
a resumed trainer continuing it, and the job filling in the decay's length."""

from __future__ import annotations

import math

import pytest
import torch

from rlsvc.config import Config, TrainerConfig
from rlsvc.models.titan import ModelConfig
from rlsvc.trainer.lr_schedule import LRSchedule
from rlsvc.trainer.titan_trainer import TitanTrainer, whole_job_decay


def test_the_schedule_by_hand():
    assert [LRSchedule().factor(s) for s in (0, 10, 1000)] == [1.0, 1.0, 1.0]
    warm = LRSchedule("constant", warmup_steps=4)
    assert [warm.factor(s) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    linear = LRSchedule("linear", warmup_steps=2, decay_steps=6, min_lr_ratio=0.1)
    # after 2 warm-up steps, 4 steps of decay from 1.0 to 0.1, then the floor
    assert [round(linear.factor(s), 6) for s in range(8)] == [0.5, 1.0, 1.0, 0.775, 0.55, 0.325, 0.1, 0.1]
    cosine = LRSchedule("cosine", decay_steps=4)
    assert [round(cosine.factor(s), 6) for s in range(5)] == [
        1.0,
        round(0.5 * (1 + math.cos(math.pi / 4)), 6),
        0.5,
        round(0.5 * (1 + math.cos(3 * math.pi / 4)), 6),
        0.0,
    ]
    assert not LRSchedule("cosine").moves and LRSchedule("cosine", decay_steps=3).moves and warm.moves


def _steps(trainer: TitanTrainer, n: int) -> list[float]:
    """The learning rate each of `n` supervised steps was taken with."""
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    rates = []
    for _ in range(n):
        trainer.sft_step(ids, torch.ones_like(ids))
        rates.append(trainer.optimizer.param_groups[0]["lr"])
    return rates


def test_the_trainer_follows_the_schedule_and_a_resumed_one_continues_it(tmp_path):
    schedule = LRSchedule("linear", warmup_steps=1, decay_steps=5)
    cfg = ModelConfig(vocab_size=64, dim=64, n_layers=1, n_heads=2, max_seq_len=16)
    first = TitanTrainer(cfg, lr=0.01, device="cpu", lr_schedule=schedule)
    assert _steps(first, 3) == pytest.approx([0.01 * schedule.factor(s) for s in range(3)]) and first.optimizer_steps() == 3
    first.save_checkpoint(str(tmp_path / "ckpt"))
    resumed = TitanTrainer(cfg, lr=0.01, device="cpu", lr_schedule=schedule)
    resumed.load_checkpoint(str(tmp_path / "ckpt"))
    assert _steps(resumed, 3) == pytest.approx([0.01 * schedule.factor(s) for s in range(3, 6)])
    assert resumed.optimizer.param_groups[0]["lr"] == 0.0  # past decay_steps: the floor (min_lr_ratio 0)


def test_the_default_keeps_the_learning_rate_constant():
    cfg = ModelConfig(vocab_size=64, dim=64, n_layers=1, n_heads=2, max_seq_len=16)
    assert _steps(TitanTrainer(cfg, lr=0.01, device="cpu"), 3) == [0.01, 0.01, 0.01]


def test_a_decay_left_to_the_job_spans_its_optimiser_steps():
    assert whole_job_decay(TrainerConfig(), 100) == TrainerConfig()  # constant: nothing to fill
    assert whole_job_decay(TrainerConfig(lr_schedule="cosine"), 100).decay_steps == 100
    assert whole_job_decay(TrainerConfig(lr_schedule="cosine", decay_steps=7), 100).decay_steps == 7
    from rlsvc.trainer.titan_trainer import TrainerSpec

    cfg = Config.model_validate(
        {"run": {"steps": 50}, "model": {"warm_start_steps": 10}, "trainer": {"lr_schedule": "linear", "minibatches": 2}}
    )
    spec = TrainerSpec.from_config(ModelConfig(), cfg, None)
    assert spec.trainer.decay_steps == 10 + 50 * 2
    assert LRSchedule("linear", 0, spec.trainer.decay_steps).factor(109) == pytest.approx(1 / 110)


def test_schedule_settings_are_checked():
    with pytest.raises(ValueError, match="lr_schedule"):
        TrainerConfig(lr_schedule="step")
    with pytest.raises(ValueError, match="min_lr_ratio"):
        TrainerConfig(min_lr_ratio=1.5)
