"""Variants of GRPO that reasoning RL uses, as small pure functions beside `rlsvc/algo/grpo.py`.

The tensor conventions are grpo.py's: N sequences of T tokens, `loss_mask[n, t] = 1` on response
tokens, logprobs at position t are of token t; group rewards are [B, G] (B prompts, G samples
each), and per-sequence advantages [N] are those flattened group by group. A loss returns the
scalar and detached diagnostics, and takes `denominator` so data-parallel ranks (and micro-batches)
divide by the global count, as `grpo.policy_loss` does.

- Dr. GRPO: `dr_grpo_advantages` + `grpo.policy_loss(normalization="token",
  denominator=dr_grpo_denominator(...))`; `dr_grpo_loss` is that call.
- GSPO: `gspo_loss` (a sequence-level importance ratio and clip).
- DAPO: `overlong_penalty` (soft length penalty added to the reward), `mask_truncated` (overlong
  filtering), `group_filter` (dynamic sampling's filter of groups whose rewards are all equal) and
  `DynamicBatch` (groups gathered over rounds until the batch is full, with a cap).

`configured_loss` is the one a trainer calls: the loss `LossSettings.kind` (`grpo.loss`) names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import torch

from rlsvc.algo.grpo import LossSettings, group_advantages, k3_kl, masked_reduce, policy_loss

G = TypeVar("G")


def dr_grpo_advantages(returns: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO's advantage for returns [B, G]: R_i - mean_j R_j, without dividing by the group's std.

    Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective" (Dr. GRPO),
    eq. 3: A_i = R(q, o_i) - mean({R(q, o_1), ..., R(q, o_G)}). The std division of GRPO weights
    questions that are too easy or too hard (small std) more; Dr. GRPO drops it.
    """
    return group_advantages(returns, normalize_std=False)


def dr_grpo_denominator(num_sequences: int, max_response_tokens: int) -> float:
    """The constant Dr. GRPO divides the summed token losses by: sequences x the generation budget.

    Dr. GRPO's objective is (1/G) sum_i sum_{t=1}^{|o_i|} min(r_it A_i, clip(r_it, 1-eps, 1+eps) A_i),
    with no 1/|o_i|: GRPO's per-response length normalisation favours long wrong answers and short
    right ones. The authors' code divides the token sum by a constant (the budget, MAX_TOKENS)
    instead of the token count, so the loss scale does not depend on the lengths sampled.
    """
    return float(max(num_sequences, 1) * max_response_tokens)


def dr_grpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    max_response_tokens: int,
    num_sequences: int | None = None,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    kl_coef: float = 0.0,
    ref_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """`grpo.policy_loss` summed over tokens and divided by `dr_grpo_denominator`. Pass the global
    `num_sequences` under data parallelism (default: this batch's)."""
    n = logprobs.shape[0] if num_sequences is None else num_sequences
    return policy_loss(
        logprobs,
        old_logprobs,
        advantages,
        loss_mask,
        LossSettings(clip_eps=clip_eps, clip_eps_high=clip_eps_high, kl_coef=kl_coef, normalization="token"),
        ref_logprobs=ref_logprobs,
        denominator=dr_grpo_denominator(n, max_response_tokens),
    )


def sequence_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """GSPO's s_i = (pi(y_i|x) / pi_old(y_i|x)) ** (1/|y_i|): the exp of the mean token log-ratio, [N]."""
    mask = loss_mask.to(logprobs.dtype)
    mean_log_ratio = ((logprobs - old_logprobs) * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
    return torch.exp(mean_log_ratio)


def gspo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    clip_eps: float = 3e-4,
    clip_eps_high: float | None = 4e-4,
    kl_coef: float = 0.0,
    ref_logprobs: torch.Tensor | None = None,
    denominator: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO's clipped objective with a sequence-level importance ratio, negated (a loss).

    Zheng et al. 2025, "Group Sequence Policy Optimization", eq. 5-7:
    J = E[(1/G) sum_i min(s_i A_i, clip(s_i, 1 - eps, 1 + eps_high) A_i)], with
    s_i = (pi(y_i|x) / pi_old(y_i|x)) ** (1/|y_i|) and A_i GRPO's group-normalised advantage.
    One ratio (and one clip decision) per response, not per token: token ratios are noisy and
    their noise accumulates over long responses. The paper's clip range is tiny (3e-4, 4e-4)
    because s_i is a geometric mean. The optional KL term is the per-sequence mean of k3.
    Rows without response tokens (micro-batch filler) add nothing; the sum is divided by
    `denominator` (default: this batch's N), like grpo's "sequence" normalisation.
    """
    mask = loss_mask.to(logprobs.dtype)
    present = (mask.sum(dim=1) > 0).to(logprobs.dtype)
    ratio = sequence_ratio(logprobs, old_logprobs, mask)
    adv = advantages.to(logprobs.dtype)
    high = clip_eps if clip_eps_high is None else clip_eps_high
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + high)
    per_seq = -torch.minimum(ratio * adv, clipped * adv) * present
    den = denominator if denominator is not None else float(mask.shape[0])
    stats: dict[str, torch.Tensor] = {}
    if kl_coef > 0.0:
        if ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs ref_logprobs")
        kl = k3_kl(logprobs, ref_logprobs)
        per_seq = per_seq + kl_coef * (kl * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        stats["kl"] = masked_reduce(kl.detach(), mask, "sequence", den)
    stats["clip_frac"] = (((ratio - clipped).abs() > 1e-9).to(mask.dtype) * present).sum().detach() / den
    stats["ratio_mean"] = (ratio.detach() * present).sum() / den
    return per_seq.sum() / den, stats


def configured_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    settings: LossSettings,
    *,
    denominator: float,
    rows: float,
    ref_logprobs: torch.Tensor | None = None,
    behaviour_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss `settings.kind` names. `denominator`: the global count `policy_loss` divides by
    (response tokens); `rows`: the global count of rows (sequences), which Dr. GRPO's and GSPO's
    losses divide by. `grpo` is `policy_loss` itself, untouched."""
    if settings.kind == "gspo":
        if settings.tis_cap is not None:
            raise ValueError("tis_cap is not available with the gspo loss")
        return gspo_loss(
            logprobs,
            old_logprobs,
            advantages,
            loss_mask,
            clip_eps=settings.clip_eps,
            clip_eps_high=settings.clip_eps_high,
            kl_coef=settings.kl_coef,
            ref_logprobs=ref_logprobs,
            denominator=rows,
        )
    loss, stats = policy_loss(
        logprobs,
        old_logprobs,
        advantages,
        loss_mask,
        settings,
        ref_logprobs=ref_logprobs,
        denominator=denominator,
        behaviour_logprobs=behaviour_logprobs,
    )
    if settings.kind == "dr_grpo":  # the same token sum over Dr. GRPO's constant; the diagnostics stay per token
        assert settings.max_response_tokens is not None  # LossSettings checks it
        loss = loss * (denominator / dr_grpo_denominator(round(rows), settings.max_response_tokens))
    return loss, stats


def overlong_penalty(lengths: torch.Tensor, max_tokens: int, cache_tokens: int) -> torch.Tensor:
    """DAPO's soft overlong punishment, added to each response's reward, [N].

    Yu et al. 2025, "DAPO", eq. 13: with L_max = `max_tokens` and L_cache = `cache_tokens`,
    R_length(y) = 0 if |y| <= L_max - L_cache; ((L_max - L_cache) - |y|) / L_cache if
    L_max - L_cache < |y| <= L_max; -1 if |y| > L_max. The penalty grows linearly over the last
    L_cache tokens, so a response is told it is long before it is cut.
    """
    if not 0 < cache_tokens <= max_tokens:
        raise ValueError(f"cache_tokens: need 0 < cache_tokens <= max_tokens, got {cache_tokens} and {max_tokens}")
    free = max_tokens - cache_tokens
    lengths = lengths.to(torch.float32)
    ramp = (free - lengths) / cache_tokens
    return torch.where(lengths <= free, torch.zeros_like(lengths), torch.where(lengths <= max_tokens, ramp, -torch.ones_like(lengths)))


def mask_truncated(loss_mask: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """DAPO's overlong filtering: truncated responses [N] (cut at the token budget) get no loss.

    Yu et al. 2025, section 3.4: a response cut off before its answer is scored as wrong
    although its reasoning may be sound; masking its loss removes that reward noise.
    """
    return loss_mask * (~truncated.bool()).to(loss_mask.dtype).unsqueeze(1)


def group_filter(rewards: torch.Tensor, tol: float = 1e-6) -> tuple[torch.Tensor, float]:
    """Dynamic sampling's filter over group rewards [B, G]: (keep [B] bool, the filtered rate).

    Yu et al. 2025, "DAPO", eq. 11: keep a prompt only when 0 < |{o_i : o_i correct}| < G; in
    general, drop groups whose rewards are all equal: their GRPO advantages are all zero, so they
    carry no gradient and only dilute the batch. The sampler draws fresh groups for the dropped
    ones; the filtered rate (dropped / B) is the zero-variance group rate users watch.
    """
    spread = rewards.max(dim=1).values - rewards.min(dim=1).values
    keep = spread > tol
    rate = 1.0 - keep.float().mean().item() if rewards.shape[0] else 0.0
    return keep, rate


@dataclass
class DynamicBatch(Generic[G]):
    """Dynamic sampling's batch: groups whose rewards are not all equal, gathered over rounds of
    generation until `want` groups or `max_rounds` rounds (DAPO's cap on generation batches).

    The caller generates a round of groups, scores them and calls `add(groups, rewards)` until
    `done`; `batch()` is then at most `want` groups (the excess of the last round is dropped, as in
    DAPO), fewer only when the cap stopped it (`short`). `filtered_rate` is over every group seen.
    """

    want: int
    max_rounds: int = 3
    kept: list[G] = field(default_factory=list)
    seen: int = 0
    dropped: int = 0
    rounds: int = 0

    def add(self, groups: Sequence[G], rewards: torch.Tensor) -> None:
        """One round: `groups` and their rewards [len(groups), G]."""
        if len(groups) != rewards.shape[0]:
            raise ValueError(f"{len(groups)} groups but rewards for {rewards.shape[0]}")
        keep, _ = group_filter(rewards)
        self.rounds += 1
        self.seen += len(groups)
        self.dropped += int((~keep).sum().item())
        self.kept.extend(g for g, k in zip(groups, keep.tolist(), strict=True) if k)

    @property
    def done(self) -> bool:
        return len(self.kept) >= self.want or self.rounds >= self.max_rounds

    @property
    def short(self) -> bool:
        return len(self.kept) < self.want

    @property
    def filtered_rate(self) -> float:
        return self.dropped / self.seen if self.seen else 0.0

    def batch(self) -> list[G]:
        return self.kept[: self.want]
