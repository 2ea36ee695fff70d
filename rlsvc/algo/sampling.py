"""The DAPO options at the level of episodes: which groups carry a gradient, the soft overlong
punishment onto rewards, and the training rows of cut answers; the loops (rlsvc/loop.py,
rlsvc/async_loop.py) call them, on the tensor functions of rlsvc/algo/variants.py."""

from __future__ import annotations

import torch

from rlsvc.algo.variants import group_filter, overlong_penalty
from rlsvc.episode import Episode


def is_truncated(ep: Episode, max_tokens: int | None) -> bool:
    """An answer of the episode was cut at `max_tokens` (`rollout.max_tokens`: an answer of
    exactly that length counts as cut)."""
    return max_tokens is not None and any(len(r) >= max_tokens for r in ep.responses)


def complete_groups(episodes: list[Episode], group_size: int) -> tuple[list[list[Episode]], torch.Tensor]:
    """The groups of `group_size` episodes, in order of first appearance, and their rewards [B, G]."""
    by_id: dict[int, list[Episode]] = {}
    for ep in episodes:
        by_id.setdefault(ep.group_id, []).append(ep)
    groups = [g for g in by_id.values() if len(g) == group_size]
    return groups, torch.tensor([[ep.reward for ep in g] for g in groups], dtype=torch.float32).reshape(len(groups), group_size)


def signal_groups(episodes: list[Episode], group_size: int) -> list[list[Episode]]:
    """The complete groups whose rewards are not all equal: those carry a gradient (non-zero advantages)."""
    groups, rewards = complete_groups(episodes, group_size)
    keep, _ = group_filter(rewards)
    return [g for g, k in zip(groups, keep.tolist(), strict=True) if k]


def signal_metrics(episodes: list[Episode], group_size: int, truncated_masked: bool, max_tokens: int) -> dict[str, float]:
    """The trained episodes that carry a gradient: in a group whose rewards differ, and (with
    `grpo.mask_truncated`) not cut at the token budget. Logged with dynamic sampling on or off,
    so its effect is measurable."""
    groups = signal_groups(episodes, group_size)
    carrying = [ep for g in groups for ep in g if not (truncated_masked and is_truncated(ep, max_tokens))]
    return {"episodes_with_signal": float(len(carrying)), "groups_with_signal": float(len(groups))}


def shape_overlong(episodes: list[Episode], max_tokens: int, buffer: int, factor: float) -> float:
    """DAPO's soft overlong punishment onto the rewards (`grpo.overlong_buffer`): `factor` x
    `variants.overlong_penalty` of each episode's longest response; returns the mean penalty."""
    if not episodes:
        return 0.0
    longest = torch.tensor([max((len(r) for r in ep.responses), default=0) for ep in episodes])
    penalty = factor * overlong_penalty(longest, max_tokens, buffer)
    for ep, p in zip(episodes, penalty.tolist(), strict=True):
        ep.reward += p
    return float(penalty.mean().item())


def truncated_rows(episodes: list[Episode], max_tokens: int) -> torch.Tensor:
    """[N] bool over the rows `build_batch` makes of `episodes` (one per decision, one for an
    episode played as one sequence): the rows of an episode with a cut answer."""
    flags = [is_truncated(ep, max_tokens) for ep in episodes]
    rows = [1 if ep.continued else min(len(ep.prompts), len(ep.responses), len(ep.logprobs)) for ep in episodes]
    return torch.tensor([f for f, n in zip(flags, rows, strict=True) for _ in range(n)], dtype=torch.bool)
