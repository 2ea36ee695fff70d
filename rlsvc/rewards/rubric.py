"""Rewards are plain callables on a finished episode, combined with weights in a rubric."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rlsvc.buffer.replay import Episode

RewardFn = Callable[[Episode], float]
log = logging.getLogger(__name__)


@dataclass
class Rubric:
    """Weighted sum of reward functions; also reports each part, so runs can see what drove it."""

    parts: Sequence[tuple[str, float, RewardFn]]

    def score(self, episode: Episode) -> tuple[float, dict[str, float]]:
        values = {name: fn(episode) for name, _, fn in self.parts}
        return sum(w * values[name] for name, w, _ in self.parts), values

    def score_all(self, episodes: list[Episode]) -> list[float | None]:
        """Each episode's reward, or None where a reward function raised or returned NaN/inf:
        one bad episode must not stop the step (the caller leaves its group out)."""
        rewards: list[float | None] = []
        for ep in episodes:
            try:
                reward, _ = self.score(ep)
                reward = float(reward)
            except Exception as e:  # a user's reward function: any error, reported, not fatal
                log.warning("reward function failed on an episode of group %s: %r", ep.group_id, e)
                reward = None
            rewards.append(reward if reward is not None and math.isfinite(reward) else None)
        return rewards


def env_return(episode: Episode) -> float:
    """The environment's return (0 for an episode that ended on an invalid answer)."""
    return 0.0 if episode.invalid else episode.env_return


def invalid_penalty(penalty: float) -> RewardFn:
    def invalid(episode: Episode) -> float:
        return penalty if episode.invalid else 0.0

    return invalid


def env_return_rubric(invalid_action_penalty: float) -> Rubric:
    """The default task reward: the environment's return, or the penalty for an invalid answer."""
    return Rubric([("game_return", 1.0, env_return), ("invalid", 1.0, invalid_penalty(invalid_action_penalty))])
