"""Replay buffer of episodes tagged with the policy version that produced them.

Staleness is bounded where batches are played, not here: the asynchronous producer plays batch b
only with a policy no older than b - `buffer.max_staleness` (rlsvc/async_loop.py), and the
synchronous loop learns from what the current policy just played. One mechanism, enforced once;
the buffer keeps episodes in order within its capacity (how old each one is, the loop reports:
rlsvc/loop.py `staleness_mean`).
"""

from __future__ import annotations

from collections import deque

from rlsvc.episode import Episode

__all__ = ["Episode", "ReplayBuffer"]  # Episode: where tasks and plug-ins import it from (rlsvc/task.py)


class ReplayBuffer:
    """FIFO episodes with a capacity; `sample` takes and removes the oldest."""

    def __init__(self, capacity: int = 65536) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self._items: deque[Episode] = deque()
        self.dropped_full = 0

    def __len__(self) -> int:
        return len(self._items)

    def add(self, episodes: list[Episode]) -> None:
        for ep in episodes:
            if len(self._items) >= self.capacity:
                self._items.popleft()
                self.dropped_full += 1
            self._items.append(ep)

    def sample(self, n: int) -> list[Episode]:
        """Take up to `n` of the oldest episodes."""
        return [self._items.popleft() for _ in range(min(n, len(self._items)))]

    def add_and_sample(self, episodes: list[Episode], n: int) -> tuple[int, list[Episode]]:
        """`add`, then `sample(n)`: (the depth left, the episodes taken). One call, so a buffer
        behind an actor costs the step one round trip."""
        self.add(episodes)
        taken = self.sample(n)
        return len(self), taken

    def add_and_take(self, episodes: list[Episode], n: int) -> tuple[int, list[Episode | int]]:
        """`add_and_sample` for a caller in another process: an episode taken from `episodes`
        comes back as its index there (the caller holds it already), so only older ones travel.
        Unpickling the 512 episodes of a default step back in the driver cost its thread about
        16 ms a step (py-spy, asynchronous job)."""
        index = {id(ep): i for i, ep in enumerate(episodes)}
        depth, taken = self.add_and_sample(episodes, n)
        return depth, [index.get(id(ep), ep) for ep in taken]

    @staticmethod
    def resolve(episodes: list[Episode], taken: list[Episode | int]) -> list[Episode]:
        """`add_and_take`'s answer as episodes again (`episodes`: what the call added)."""
        return [episodes[t] if isinstance(t, int) else t for t in taken]

    def snapshot(self) -> dict:
        """Contents and counters, for a checkpoint."""
        return {"items": list(self._items), "dropped_full": self.dropped_full}

    def restore(self, snap: dict) -> None:
        self._items = deque(snap["items"])
        self.dropped_full = snap["dropped_full"]
