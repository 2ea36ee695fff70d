"""A fixed-seed GRPO step gives the losses it gave before: episodes through the batch builder,
the reference's and the proximal logprobs, two minibatches of the trainer with every loss setting
in play (asymmetric clipping, the KL term, truncated importance weights). The numbers were
recorded at 70d04ac, before the batch became a dataclass and the loss settings moved into the
trainer's spec; a change meant to be non-numeric must leave them as they are (torchtitan keeps
loss baselines for the same reason)."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
import torch

from rlsvc.algo.grpo import LossSettings
from rlsvc.episode import Episode
from rlsvc.models.titan import ModelConfig
from rlsvc.models.tokenizer import PAD_ID, VOCAB
from rlsvc.trainer.batch import build_batch
from rlsvc.trainer.titan_trainer import TitanReference, TitanTrainer

BASELINE = {
    "token": {
        "minibatches": [
            {"loss": 0.001340252347290516, "kl": 0.0, "grad_norm": 0.46357959508895874, "tis_weight": 0.0641663670539856},
            {"loss": 0.02523220330476761, "kl": 0.10668904334306717, "grad_norm": 1.2141666412353516, "tis_weight": 0.034301139414310455},
        ],
        "checksum": 1432.6536778775646,
    },
    "sequence": {
        "minibatches": [
            {"loss": -0.0004460351192392409, "kl": 0.0, "grad_norm": 0.3825104832649231, "tis_weight": 0.045222245156764984},
            {"loss": 0.028195282444357872, "kl": 0.13451094925403595, "grad_norm": 1.5345994234085083, "tis_weight": 0.03498585522174835},
        ],
        "checksum": 1433.1038792016404,
    },
}


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One thread: the recorded numbers do not hang on how a matmul splits its sums."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def episodes() -> list[Episode]:
    """Two groups of four, one to three decisions each, one played as a single token sequence."""
    rng = random.Random(7)
    eps = []
    for i in range(8):
        ep = Episode(group_id=i // 4, policy_version=0, continued=(i == 5))
        for _ in range(1 + i % 3):
            ep.prompts.append([rng.randrange(3, len(VOCAB)) for _ in range(rng.randint(3, 6))])
            ep.responses.append([rng.randrange(3, len(VOCAB)) for _ in range(rng.randint(1, 3))])
            ep.logprobs.append([-rng.random() * 2 for _ in ep.responses[-1]])
        ep.advantage = rng.uniform(-1, 1)
        eps.append(ep)
    return eps


@pytest.mark.parametrize("normalization", ["token", "sequence"])
def test_a_fixed_seed_step_gives_the_recorded_losses(normalization: str, one_thread: None) -> None:
    cfg = ModelConfig()
    settings = LossSettings(clip_eps=0.2, clip_eps_high=0.28, kl_coef=0.1, tis_cap=2.0)
    trainer = TitanTrainer(cfg, lr=1e-3, device="cpu", seed=3, loss=settings)
    batch = build_batch(episodes(), PAD_ID, normalization)
    batch.ref_logprobs = TitanReference(cfg, device="cpu", seed=3).logprobs(batch.input_ids, None, batch.lengths)
    batch.prox_logprobs = trainer.logprobs(batch.input_ids, None, batch.lengths)
    metrics = [trainer.train_step(minibatch) for minibatch in batch.split(2)]
    expected = BASELINE[normalization]
    for got, want in zip(metrics, expected["minibatches"], strict=True):
        assert {k: got[k] for k in want} == pytest.approx(want, rel=1e-5, abs=1e-7)
    # rel 1e-7: the recorded checksum came from an AVX2 machine; on an AVX-512 one the same step's
    # float32 kernels round differently and it was 9e-9 off (the losses agree to 1e-5 either way),
    # while the two Adam steps themselves move it by 4e-4 (from 1432.03 to 1432.65)
    assert trainer.parameter_checksum() == pytest.approx(expected["checksum"], rel=1e-7)
