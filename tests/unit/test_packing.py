"""Shared-prefix packing (rlsvc/models/packing.py): rows that share a prompt compute it once, and
every logit a loss or logprob reads, and every gradient, is the unpacked forward's."""

from __future__ import annotations

import torch

from rlsvc.models.packing import plan, unpack
from rlsvc.models.titan import ModelConfig, build_model, forward
from rlsvc.trainer.batch import TrainBatch
from rlsvc.trainer.titan_trainer import TitanTrainer


def _groups(groups: int, per_group: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded rows: `groups` prompts of 3-7 tokens, each continued `per_group` times by
    1-4 tokens of its own, and one row that shares nothing."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(groups):
        prompt = torch.randint(1, 60, (int(torch.randint(3, 8, (1,), generator=g)),), generator=g)
        rows += [
            torch.cat([prompt, torch.randint(1, 60, (int(torch.randint(1, 5, (1,), generator=g)),), generator=g)]) for _ in range(per_group)
        ]
    rows.append(torch.randint(1, 60, (12,), generator=g))
    lengths = torch.tensor([len(r) for r in rows])
    ids = torch.zeros(len(rows), int(lengths.max()), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
    return ids, lengths


def _needed(ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The positions whose logits some loss reads: all but each row's last token and its padding."""
    return torch.arange(ids.shape[1])[None] < (lengths - 1)[:, None]


def test_a_group_sharing_its_prompt_is_one_sequence_and_the_packed_mask_keeps_rows_apart():
    prompt = [5, 6, 7, 8]
    ids = torch.tensor([prompt + [9, 0], prompt + [10, 11], prompt + [12, 0], [1, 2, 3, 4, 5, 6]])
    lengths = torch.tensor([5, 6, 5, 6])
    packed = plan(ids, lengths)
    assert packed is not None and packed.ids.shape[0] == 2  # the group, and the row of its own
    (c,) = [c for c in range(2) if packed.ids[c, :4].tolist() == prompt]
    # the prefix holds every row's needed tokens but row 1's fifth, which follows it with position 4
    assert packed.ids[c, :5].tolist() == [*prompt, 10] and packed.positions[c, :5].tolist() == [0, 1, 2, 3, 4]
    mask = packed.mask[c, 0]
    assert mask[4, :5].tolist() == [True] * 5  # row 1's own token sees the prompt and itself
    assert not mask[:4, 4].any()  # the prompt does not see it
    assert packed.index[0, :4].tolist() == packed.index[2, :4].tolist() == packed.index[1, :4].tolist()


def test_a_group_longer_than_twice_its_rows_still_packs_into_one_sequence():
    # 8 rows of a 6-token prompt and 3 tokens each: one sequence of 6 + 8 x 2 = 22 tokens (a
    # cap of 4x the longest row) pads less than two of 16 and 12 (a cap of 2x)
    prompt = [1, 2, 3, 4, 5, 6]
    ids = torch.tensor([[*prompt, 10 + i, 20 + i, 30 + i] for i in range(8)])
    packed = plan(ids, torch.full((8,), 9))
    assert packed is not None and tuple(packed.ids.shape) == (1, 22)


def test_a_packed_sequence_stays_within_the_length_cap():
    from rlsvc.models.packing import MAX_PACKED_LENGTH

    # 8 rows of a 1400-token prompt and 101 tokens each: one sequence would be 1400 + 8 x 100
    prompt = torch.arange(1400) % 50 + 1
    ids = torch.stack([torch.cat([prompt, torch.full((101,), 51 + i)]) for i in range(8)])
    packed = plan(ids, torch.full((8,), 1501))
    assert packed is not None and packed.ids.shape[1] <= MAX_PACKED_LENGTH and packed.ids.shape[0] == 2


def test_rows_that_share_nothing_are_not_packed():
    ids = torch.arange(1, 41).reshape(4, 10) % 60
    assert plan(ids, torch.full((4,), 10)) is None


def test_packed_logits_and_gradients_equal_the_unpacked_ones():
    torch.manual_seed(0)
    model = build_model(ModelConfig(), seed=0)
    ids, lengths = _groups(groups=6, per_group=5)
    packed = plan(ids, lengths)
    assert packed is not None and packed.ids.numel() < 0.5 * ids.numel()
    need = _needed(ids, lengths)
    plain, shared = forward(model, ids), forward(model, ids, lengths)
    assert torch.allclose(plain[need], shared[need], atol=1e-5)
    assert torch.equal(unpack(model(packed.ids, positions=packed.positions, attention_masks=packed.mask), packed)[need], shared[need])

    weights = torch.randn(ids.shape)

    def grads(logits_of) -> list[torch.Tensor]:
        model.zero_grad()
        logp = torch.log_softmax(logits_of()[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        (logp * weights[:, 1:] * need[:, :-1]).sum().backward()
        return [p.grad.clone() for p in model.parameters()]

    for a, b in zip(grads(lambda: forward(model, ids)), grads(lambda: forward(model, ids, lengths)), strict=True):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)


def test_a_trainer_step_packed_equals_the_step_unpacked():
    ids, lengths = _groups(groups=8, per_group=4, seed=3)
    mask = torch.zeros(ids.shape)
    for i, n in enumerate(lengths.tolist()):
        mask[i, n - 2 : n] = 1.0  # the last two tokens are the answer
    g = torch.Generator().manual_seed(4)
    batch = TrainBatch(
        input_ids=ids,
        loss_mask=mask,
        old_logprobs=-torch.rand(ids.shape, generator=g) * mask,
        advantages=torch.randn(len(ids), generator=g),
        lengths=lengths,
    )
    steps = {}
    for share in (False, True):
        trainer = TitanTrainer(ModelConfig(), lr=1e-3, seed=0, share_prefixes=share)
        steps[share] = (trainer.train_step(batch), trainer.logprobs(ids, lengths=lengths), trainer.parameter_checksum())
    (m0, lp0, sum0), (m1, lp1, sum1) = steps[False], steps[True]
    for key in ("loss", "entropy", "ratio_mean", "grad_norm", "mismatch_kl"):
        assert abs(m0[key] - m1[key]) <= 1e-5 * max(1.0, abs(m0[key])), key
    assert torch.allclose(lp0, lp1, atol=1e-5) and lp1[torch.arange(ids.shape[1])[None] >= lengths[:, None]].abs().max() == 0
    assert abs(sum0 - sum1) <= 1e-6 * abs(sum0)
