"""BlackJack's reward: the game's return, or a fixed penalty for an answer that is not an action
(the default task rubric, rlsvc/rewards/rubric.py; the names are kept for existing callers)."""

from __future__ import annotations

from rlsvc.rewards.rubric import env_return as game_return
from rlsvc.rewards.rubric import env_return_rubric as blackjack_rubric
from rlsvc.rewards.rubric import invalid_penalty as make_invalid_penalty

__all__ = ["blackjack_rubric", "game_return", "make_invalid_penalty"]
