"""The records the rollout loop, the buffer, the reward step and the trainer's batch pass
between them: a finished `Episode`, and the `FailedObservation` an env fleet returns for a
session it could not play on. Plain dataclasses, imported by every layer without crossing one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Episode:
    """One finished episode: its decisions as token sequences, and how it was scored."""

    group_id: int
    policy_version: int
    prompts: list[list[int]] = field(default_factory=list)
    """Prompt token ids of each decision (when `continued`: the tokens that turn added)."""
    responses: list[list[int]] = field(default_factory=list)
    """Sampled token ids of each decision."""
    logprobs: list[list[float]] = field(default_factory=list)
    """Behaviour (vLLM) logprob of each sampled token."""
    texts: list[str] = field(default_factory=list)
    """Decoded answers, for transcripts."""
    observations: list[dict[str, Any]] = field(default_factory=list)
    """The observation each decision was made from."""
    env_return: float = 0.0
    outcome: str | None = None
    """'win' / 'push' / 'loss' (BlackJack), 'solved' / 'partial' / 'wrong' / 'turn_limit' /
    'failed' (code), or 'invalid' / 'truncated'."""
    invalid: bool = False
    failed: bool = False
    """The environment could not score it (its backend failed): its group is left out of training."""
    reward: float = 0.0
    """Filled by the reward step: what GRPO normalises."""
    advantage: float = 0.0
    continued: bool = False
    """One token sequence (`rollout.context=episode`): each turn's prompt extends the previous
    turns, so the episode trains as one row, prompts[0] + responses[0] + prompts[1] + ..."""

    def sequence(self) -> list[int]:
        """All tokens so far, in order, as vLLM received and sampled them."""
        return [t for prompt, response in zip(self.prompts, self.responses) for t in (*prompt, *response)]


@dataclass
class FailedObservation:
    """What an env fleet returns for a session it could not play on (the environment sent
    something unreadable, its server or actor went away): the episode ends, `failed`, and its
    group is left out of training; `outcome` says why."""

    error: str = ""
    outcome: str = "env_failed"
    done: bool = True
    reward: float = 0.0
    failed: bool = True
    metadata: dict = field(default_factory=dict)
