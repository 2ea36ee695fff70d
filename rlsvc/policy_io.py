"""How the policy reads and writes BlackJack: observation -> prompt ids, answer text -> action.

Shared by training (rollout) and evaluation, so both see exactly the same prompts.
"""

from __future__ import annotations

from typing import Any

from rlsvc.envs.blackjack import format_prompt, parse_action


class BlackjackCodec:
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
        self.action_ids = {
            "hit": tokenizer.convert_tokens_to_ids("HIT"),
            "stand": tokenizer.convert_tokens_to_ids("STAND"),
        }
        self._cache: dict[tuple, list[int]] = {}

    def encode(self, obs: Any) -> list[int]:
        key = (obs.player_sum, obs.dealer_card, bool(obs.usable_ace))
        if key not in self._cache:  # ~300 distinct states: tokenise each once
            ids = self.tokenizer.encode(format_prompt(obs), add_special_tokens=False)
            self._cache[key] = self.bos + list(ids)
        return self._cache[key]

    def parse(self, text: str) -> str | None:
        return parse_action(text)

    @property
    def allowed_token_ids(self) -> list[int]:
        return [self.action_ids["hit"], self.action_ids["stand"]]
