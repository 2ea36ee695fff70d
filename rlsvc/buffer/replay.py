"""Replay buffer of episodes tagged with the policy version that produced them.

The staleness bound is the contract between rollout and training: an episode sampled at trainer
version v was produced by a policy no older than v - max_staleness. With max_staleness = 0 the
buffer is on-policy and everything older is dropped.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Episode:
    """One finished episode: its decisions as token sequences, and how it was scored."""

    group_id: int
    policy_version: int
    prompts: list[list[int]] = field(default_factory=list)
    """Prompt token ids of each decision."""
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


class ReplayBuffer:
    """FIFO episodes with a capacity and a staleness bound; `sample` takes and removes."""

    def __init__(self, capacity: int = 65536, max_staleness: int = 0) -> None:
        if capacity < 1 or max_staleness < 0:
            raise ValueError("capacity must be >= 1 and max_staleness >= 0")
        self.capacity = capacity
        self.max_staleness = max_staleness
        self._items: deque[Episode] = deque()
        self.dropped_stale = 0
        self.dropped_full = 0

    def __len__(self) -> int:
        return len(self._items)

    def add(self, episodes: list[Episode]) -> None:
        for ep in episodes:
            if len(self._items) >= self.capacity:
                self._items.popleft()
                self.dropped_full += 1
            self._items.append(ep)

    def evict_stale(self, current_version: int) -> int:
        """Drop episodes older than `current_version - max_staleness`; return how many."""
        oldest_ok = current_version - self.max_staleness
        keep = deque(ep for ep in self._items if ep.policy_version >= oldest_ok)
        dropped = len(self._items) - len(keep)
        self._items = keep
        self.dropped_stale += dropped
        return dropped

    def sample(self, n: int, current_version: int) -> list[Episode]:
        """Take up to `n` of the oldest fresh-enough episodes (oldest first keeps staleness low)."""
        self.evict_stale(current_version)
        return [self._items.popleft() for _ in range(min(n, len(self._items)))]

    def snapshot(self) -> dict:
        """Contents and counters, for a checkpoint."""
        return {"items": list(self._items), "dropped_stale": self.dropped_stale, "dropped_full": self.dropped_full}

    def restore(self, snap: dict) -> None:
        self._items = deque(snap["items"])
        self.dropped_stale, self.dropped_full = snap["dropped_stale"], snap["dropped_full"]

    def staleness(self, episodes: list[Episode], current_version: int) -> list[int]:
        return [current_version - ep.policy_version for ep in episodes]
