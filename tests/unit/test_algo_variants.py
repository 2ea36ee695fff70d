"""GRPO's variants (rlsvc/algo/variants.py) against hand-computed examples: Dr. GRPO, GSPO, DAPO's
overlong shaping and dynamic sampling's group filter."""

from __future__ import annotations

import math

import pytest
import torch

from rlsvc.algo.grpo import LossSettings, group_advantages, policy_loss
from rlsvc.algo.variants import (
    DynamicBatch,
    dr_grpo_advantages,
    dr_grpo_denominator,
    dr_grpo_loss,
    group_filter,
    gspo_loss,
    mask_truncated,
    overlong_penalty,
    sequence_ratio,
)


def test_dr_grpo_advantages_are_centred_but_not_divided_by_the_std():
    returns = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.2, 0.2, 0.2, 0.6]])
    torch.testing.assert_close(dr_grpo_advantages(returns), torch.tensor([[0.5, -0.5, -0.5, 0.5], [-0.1, -0.1, -0.1, 0.3]]))
    # GRPO's would be +-1 in the first group (std 0.5): Dr. GRPO keeps the scale of the reward
    assert group_advantages(returns)[0].tolist() == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-4)


def test_dr_grpo_loss_sums_tokens_over_a_constant_budget():
    # two responses, on-policy (ratio 1): 1 token with advantage +1, 3 tokens with advantage -1;
    # per-token loss is -A, so the token sum is -1 + 3 = 2; budget 4 tokens, 2 responses: 2 / 8
    lp = torch.zeros(2, 4)
    mask = torch.tensor([[1.0, 0, 0, 0], [1, 1, 1, 0]])
    adv = torch.tensor([1.0, -1.0])
    loss, stats = dr_grpo_loss(lp, lp, adv, mask, max_response_tokens=4)
    assert loss.item() == pytest.approx(2 / 8) and dr_grpo_denominator(2, 4) == 8.0
    # GRPO's token mean gives 2 / 4 and its per-sequence mean (-1 + 1) / 2 = 0: the length bias
    assert policy_loss(lp, lp, adv, mask)[0].item() == pytest.approx(0.5)
    assert policy_loss(lp, lp, adv, mask, LossSettings(normalization="sequence"))[0].item() == pytest.approx(0.0)
    global_n, _ = dr_grpo_loss(lp, lp, adv, mask, max_response_tokens=4, num_sequences=8)  # data parallel
    assert global_n.item() == pytest.approx(2 / 32) and stats["clip_frac"].item() == 0.0


def _lp(token_ratios: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    old = torch.zeros(1, len(token_ratios) + 1)
    new = torch.tensor([[0.0] + [math.log(r) for r in token_ratios]], requires_grad=True)
    return new, old


def test_gspo_ratio_is_the_geometric_mean_of_token_ratios_and_clips_per_sequence():
    mask = torch.tensor([[0.0, 1.0, 1.0]])  # position 0 is the prompt
    new, old = _lp([2.0, 0.5])
    assert sequence_ratio(new, old, mask).item() == pytest.approx(1.0)  # sqrt(2 * 0.5)
    loss, _ = gspo_loss(new, old, torch.tensor([1.0]), mask, clip_eps=0.2, clip_eps_high=0.2)
    assert loss.item() == pytest.approx(-1.0)
    # token-level GRPO clips the first token to 1.2: -(1.2 + 0.5) / 2
    assert policy_loss(new, old, torch.tensor([1.0]), mask)[0].item() == pytest.approx(-0.85)

    new, old = _lp([1.21, 1.0])  # s = sqrt(1.21) = 1.1
    loss, stats = gspo_loss(new, old, torch.tensor([2.0]), mask, clip_eps=0.2, clip_eps_high=0.2)
    assert loss.item() == pytest.approx(-2.2) and stats["clip_frac"].item() == 0.0 and stats["ratio_mean"].item() == pytest.approx(1.1)
    loss.backward()
    # d(-A s)/d logp_t = -A s / |y| on each response token, 0 on the prompt
    torch.testing.assert_close(new.grad, torch.tensor([[0.0, -1.1, -1.1]]))
    clipped, stats = gspo_loss(new, old, torch.tensor([2.0]), mask, clip_eps=0.05, clip_eps_high=0.05)
    assert clipped.item() == pytest.approx(-2.1) and stats["clip_frac"].item() == 1.0  # min(1.1, 1.05) * 2


def test_gspo_batches_divide_by_the_denominator_and_ignore_filler_rows():
    lp = torch.zeros(3, 3)
    mask = torch.tensor([[0.0, 1, 1], [0, 1, 0], [0, 0, 0]])  # the last row has no response tokens
    adv = torch.tensor([1.0, -3.0, 5.0])
    loss, _ = gspo_loss(lp, lp, adv, mask)
    assert loss.item() == pytest.approx((-1.0 + 3.0 + 0.0) / 3)
    assert gspo_loss(lp, lp, adv, mask, denominator=4.0)[0].item() == pytest.approx(2.0 / 4)
    ref = torch.full((3, 3), math.log(0.5))
    with_kl, stats = gspo_loss(lp, lp, adv, mask, kl_coef=0.1, ref_logprobs=ref)
    k3 = 0.5 - math.log(0.5) - 1  # exp(r) - r - 1 with r = log 0.5
    assert with_kl.item() == pytest.approx((2.0 + 0.1 * 2 * k3) / 3) and stats["kl"].item() == pytest.approx(2 * k3 / 3)
    with pytest.raises(ValueError, match="ref_logprobs"):
        gspo_loss(lp, lp, adv, mask, kl_coef=0.1)


def test_dapo_overlong_penalty_ramps_over_the_cache_window():
    lengths = torch.tensor([5, 6, 7, 8, 10, 11])
    # L_max 10, L_cache 4: free up to 6, then (6 - |y|) / 4, -1 beyond 10
    assert overlong_penalty(lengths, max_tokens=10, cache_tokens=4).tolist() == pytest.approx([0.0, 0.0, -0.25, -0.5, -1.0, -1.0])
    with pytest.raises(ValueError, match="cache_tokens"):
        overlong_penalty(lengths, max_tokens=10, cache_tokens=0)


def test_dapo_overlong_filtering_masks_truncated_responses():
    mask = torch.tensor([[0.0, 1, 1], [0, 1, 1], [0, 1, 0]])
    out = mask_truncated(mask, torch.tensor([False, True, False]))
    torch.testing.assert_close(out, torch.tensor([[0.0, 1, 1], [0, 0, 0], [0, 1, 0]]))


def test_group_filter_drops_groups_whose_rewards_are_all_equal():
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.5, 0.5, 0.5 + 1e-3]])
    keep, rate = group_filter(rewards)
    assert keep.tolist() == [False, True, False, True] and rate == pytest.approx(0.5)
    keep, rate = group_filter(torch.zeros(0, 4))
    assert keep.numel() == 0 and rate == 0.0


def test_dynamic_batch_gathers_groups_with_signal_until_full_or_capped():
    batch = DynamicBatch[str](want=3, max_rounds=3)
    batch.add(["a", "b", "c"], torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]))  # keeps b
    assert not batch.done and batch.kept == ["b"]
    batch.add(["d", "e", "f"], torch.tensor([[1.0, 0.0], [0.5, 0.0], [0.2, 0.3]]))  # keeps all three
    assert batch.done and not batch.short and batch.batch() == ["b", "d", "e"]  # the excess f dropped
    assert batch.rounds == 2 and batch.filtered_rate == pytest.approx(2 / 6)
    capped = DynamicBatch[int](want=4, max_rounds=2)
    for _ in range(2):
        capped.add([1, 2], torch.tensor([[1.0, 1.0], [0.0, 1.0]]))
    assert capped.done and capped.short and capped.batch() == [2, 2] and capped.filtered_rate == 0.5
    with pytest.raises(ValueError, match="2 groups but rewards for 1"):
        capped.add([1, 2], torch.ones(1, 2))
