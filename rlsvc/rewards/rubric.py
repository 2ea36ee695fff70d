"""Rewards are plain callables on a finished episode, combined with weights in a rubric."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rlsvc.buffer.replay import Episode

RewardFn = Callable[[Episode], float]


@dataclass
class Rubric:
    """Weighted sum of reward functions; also reports each part, so runs can see what drove it."""

    parts: Sequence[tuple[str, float, RewardFn]]

    def score(self, episode: Episode) -> tuple[float, dict[str, float]]:
        values = {name: fn(episode) for name, _, fn in self.parts}
        return sum(w * values[name] for name, w, _ in self.parts), values

    def score_all(self, episodes: list[Episode]) -> list[Episode]:
        for ep in episodes:
            ep.reward, _ = self.score(ep)
        return episodes
