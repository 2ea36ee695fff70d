"""BlackJack's reward: the game's return, or a fixed penalty for an answer that is not an action."""

from __future__ import annotations

from rlsvc.buffer.replay import Episode
from rlsvc.rewards.rubric import Rubric


def game_return(episode: Episode) -> float:
    return 0.0 if episode.invalid else episode.env_return


def make_invalid_penalty(penalty: float):
    def invalid_penalty(episode: Episode) -> float:
        return penalty if episode.invalid else 0.0

    return invalid_penalty


def blackjack_rubric(invalid_action_penalty: float) -> Rubric:
    return Rubric([("game_return", 1.0, game_return), ("invalid", 1.0, make_invalid_penalty(invalid_action_penalty))])
