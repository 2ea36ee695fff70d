"""GRPO math as small pure functions: token logprobs, group advantages, the clipped policy loss.

Shapes: N sequences of T tokens. `loss_mask[n, t] = 1` where token t of sequence n was sampled
by the policy (a response token); logprobs at position t are of token t given tokens < t.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from rlsvc.config import GRPOConfig

Normalization = Literal["token", "sequence"]
LossKind = Literal["grpo", "dr_grpo", "gspo"]


@dataclass(frozen=True)
class LossSettings:
    """The policy loss's settings for a whole job: given once, in the trainer's spec
    (rlsvc/trainer/titan_trainer.py `TrainerSpec`), not with every step."""

    clip_eps: float = 0.2
    """Lower clip of the importance ratio (and upper, unless `clip_eps_high` is set)."""
    clip_eps_high: float | None = None
    """Upper clip of the ratio (DAPO's clip-higher); None: `clip_eps`."""
    kl_coef: float = 0.0
    """Weight of the k3 KL term toward the reference; 0: no term."""
    tis_cap: float | None = None
    """Decoupled PPO with truncated importance weights (see `policy_loss`); None: on-policy."""
    normalization: Normalization = "token"
    """How sums over tokens are divided. A job keeps "token": its `grpo.normalization=sequence`
    is already in the batch's mask weights (rlsvc/trainer/batch.py)."""
    allowed_token_ids: tuple[int, ...] | None = None
    """The tokens vLLM was restricted to (`rollout.constrained_actions`): the trainer's logprobs
    are restricted alike; None: the whole vocabulary."""
    kind: LossKind = "grpo"
    """Which loss (`grpo.loss`): `policy_loss` as it is, Dr. GRPO's denominator, or GSPO's
    sequence ratio (rlsvc/algo/variants.py `configured_loss`)."""
    max_response_tokens: int | None = None
    """Dr. GRPO's token budget (`rollout.max_tokens`): its loss divides by sequences x this."""
    temperature: float = 1.0
    """The rollout's sampling temperature (`rollout.temperature`): the trainer scores tokens
    under the distribution vLLM sampled from, log softmax(logits / temperature), which is what
    vLLM reports as their logprobs (its processed logprobs). At 1 for any other temperature the
    ratio would be off 1 on the policy's own samples (at 1.2: logprob_mismatch 0.004-0.006 and
    0.4-0.5% of tokens clipped, measured in 3 steps of the reasoning miniature)."""

    def __post_init__(self) -> None:
        if self.kind == "dr_grpo" and not self.max_response_tokens:
            raise ValueError("loss dr_grpo needs max_response_tokens (rollout.max_tokens)")

    @classmethod
    def from_config(
        cls, grpo: GRPOConfig, allowed_token_ids: Sequence[int] | None, max_response_tokens: int | None = None, temperature: float = 1.0
    ) -> LossSettings:
        """A job's settings; `max_response_tokens` (`rollout.max_tokens`) is kept for Dr. GRPO only;
        `temperature`: `rollout.temperature` (0, greedy, scores at 1: no sampling to match)."""
        allowed = tuple(allowed_token_ids) if allowed_token_ids is not None else None
        budget = max_response_tokens if grpo.loss == "dr_grpo" else None
        scale = temperature if temperature > 0 else 1.0
        return cls(grpo.clip_eps, grpo.clip_eps_high, grpo.kl_coef, grpo.tis_cap, "token", allowed, grpo.loss, budget, scale)


def mask_logits(logits: torch.Tensor, allowed_token_ids: Sequence[int] | None) -> torch.Tensor:
    """Keep only `allowed_token_ids` (the same restriction vLLM applied while sampling)."""
    if not allowed_token_ids:
        return logits
    keep = torch.full((logits.shape[-1],), float("-inf"), device=logits.device, dtype=logits.dtype)
    keep[torch.as_tensor(list(allowed_token_ids), device=logits.device)] = 0.0
    return logits + keep


def token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, allowed_token_ids: Sequence[int] | None = None, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log p(input_ids[:, t] | input_ids[:, :t]) and the entropy of that distribution, [N, T],
    under the logits divided by `temperature` (the sampler's distribution).

    Position 0 has no prediction and is 0 in both outputs.
    """
    scaled = logits[:, :-1].float() if temperature == 1.0 else logits[:, :-1].float() / temperature
    logp_all = F.log_softmax(mask_logits(scaled, allowed_token_ids), dim=-1)
    picked = logp_all.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    probs = logp_all.exp()
    # 0 * -inf is nan for masked-out tokens; they contribute nothing to the entropy.
    ent = -(probs * torch.where(probs > 0, logp_all, torch.zeros_like(logp_all))).sum(-1)
    zero = torch.zeros_like(picked[:, :1])
    return torch.cat([zero, picked], dim=1), torch.cat([zero, ent], dim=1)


def group_advantages(returns: torch.Tensor, normalize_std: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """GRPO advantages for returns of shape [B, G]: subtract the group mean, optionally divide by its std."""
    centred = returns - returns.mean(dim=1, keepdim=True)
    if not normalize_std:
        return centred
    return centred / (returns.std(dim=1, unbiased=False, keepdim=True) + eps)


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref) per token: exp(r) - r - 1 with r = ref - pi."""
    r = ref_logprobs - logprobs
    return torch.exp(r) - r - 1.0


def masked_reduce(values: torch.Tensor, mask: torch.Tensor, normalization: Normalization, denominator: float | None) -> torch.Tensor:
    """Sum `values` over the mask: per token (/ tokens) or per sequence (mean within each, / sequences).

    `denominator` overrides the count, so data-parallel ranks can divide by the global count.
    """
    if normalization == "token":
        total = (values * mask).sum()
        return total / (denominator if denominator is not None else mask.sum().clamp(min=1.0))
    per_seq = (values * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
    return per_seq.sum() / (denominator if denominator is not None else float(mask.shape[0]))


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    settings: LossSettings = LossSettings(),
    *,
    ref_logprobs: torch.Tensor | None = None,
    denominator: float | None = None,
    behaviour_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-style clipped surrogate against `old_logprobs`, plus an optional k3 KL term.

    `settings` give the clipping, the KL weight, `tis_cap` and the normalisation (its
    `allowed_token_ids` are the caller's, who computed `logprobs`).
    On-policy (`tis_cap` None), `old_logprobs` are the behaviour policy's (vLLM's). Off-policy
    with truncated importance sampling (decoupled PPO): `old_logprobs` are the trainer's own
    before the step (the proximal policy), and each token's loss is weighted by
    min(pi_old / pi_behaviour, tis_cap), detached, with `behaviour_logprobs` from vLLM.
    `advantages` is per sequence [N]; it is broadcast over that sequence's response tokens.
    Returns the scalar loss and detached diagnostics (already reduced with the same weighting).
    """
    clip_eps, kl_coef, tis_cap, normalization = settings.clip_eps, settings.kl_coef, settings.tis_cap, settings.normalization
    mask = loss_mask.to(logprobs.dtype)
    adv = advantages.to(logprobs.dtype).unsqueeze(1)
    ratio = torch.exp(logprobs - old_logprobs)
    high = clip_eps if settings.clip_eps_high is None else settings.clip_eps_high
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + high)
    per_token = -torch.minimum(ratio * adv, clipped * adv)
    stats: dict[str, torch.Tensor] = {}
    if tis_cap is not None:
        if behaviour_logprobs is None:
            raise ValueError("tis_cap needs behaviour_logprobs")
        weight = torch.exp(old_logprobs - behaviour_logprobs).clamp(max=tis_cap).detach()
        per_token = per_token * weight
        stats["tis_weight"] = masked_reduce(weight, mask, normalization, denominator)
    if kl_coef > 0.0:
        if ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs ref_logprobs")
        kl = k3_kl(logprobs, ref_logprobs)
        per_token = per_token + kl_coef * kl
        stats["kl"] = masked_reduce(kl.detach(), mask, normalization, denominator)
    loss = masked_reduce(per_token, mask, normalization, denominator)
    clip_frac = ((ratio - clipped).abs() > 1e-6).to(mask.dtype)
    stats["clip_frac"] = masked_reduce(clip_frac, mask, normalization, denominator)
    stats["ratio_mean"] = masked_reduce(ratio.detach(), mask, normalization, denominator)
    return loss, stats
