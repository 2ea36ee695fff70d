"""How the policy reads and writes each environment: observation -> prompt ids, sampled text ->
action, and the per-environment episode metrics.

Shared by training (rollout) and evaluation, so both see exactly the same prompts.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from rlsvc.buffer.replay import Episode
from rlsvc.envs.blackjack import format_prompt, parse_action


def _rates(episodes: list[Episode], outcomes: tuple[str, ...]) -> dict[str, float]:
    n = max(len(episodes), 1)
    counts = Counter(ep.outcome for ep in episodes)
    return {f"{o}_rate": counts[o] / n for o in outcomes}


class BlackjackCodec:
    prompt_format = "blackjack/v1"
    outcomes = ("win", "push", "loss", "invalid", "truncated")

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

    @staticmethod
    def observe(obs: Any) -> dict[str, Any]:
        """What a transcript keeps of an observation."""
        return {k: getattr(obs, k) for k in ("player_sum", "dealer_card", "usable_ace")}

    def episode_metrics(self, episodes: list[Episode]) -> dict[str, float]:
        decisions = sum(len(ep.responses) for ep in episodes)
        return {**_rates(episodes, self.outcomes),
                "hit_rate": sum(t.strip() == "HIT" for ep in episodes for t in ep.texts) / max(decisions, 1)}

    @property
    def allowed_token_ids(self) -> list[int]:
        return [self.action_ids["hit"], self.action_ids["stand"]]


ANSWER_PREFIX = "ANSWER:"


class CodeCodec:
    """The code environment as text: the task, what the last cell printed (or raised), and a
    prompt to act. A reply that starts with `ANSWER:` submits the rest (a solution, or a number);
    any other reply is code to run in the episode's session."""

    prompt_format = "code/v1"
    outcomes = ("solved", "partial", "wrong", "turn_limit", "failed", "truncated")
    allowed_token_ids = None
    OUTPUT_CHARS = 160  # of the last cell's output shown to the policy

    def __init__(self, tokenizer: Any, max_prompt_tokens: int) -> None:
        self.tokenizer = tokenizer
        self.bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
        self.max_prompt_tokens = max_prompt_tokens - len(self.bos)

    def render(self, obs: Any) -> str:
        parts = [f"TASK: {obs.prompt}\n"]
        if obs.turn:
            if obs.stdout:
                parts.append(f"OUT: {obs.stdout[-self.OUTPUT_CHARS:]}\n")
            if obs.error_type:
                parts.append(f"ERR: {obs.error_type}: {(obs.error_message or '')[:self.OUTPUT_CHARS]}\n")
        parts.append(f"TURN {obs.turn + 1}/{obs.max_turns} (code, or {ANSWER_PREFIX} ...)\n>>> ")
        return "".join(parts)

    def encode(self, obs: Any) -> list[int]:
        ids = self.tokenizer.encode(self.render(obs), add_special_tokens=False)
        return self.bos + list(ids[-self.max_prompt_tokens:])  # keep the end: the latest output and the cue

    def parse(self, text: str) -> tuple[str, str]:
        stripped = text.strip()
        if stripped.startswith(ANSWER_PREFIX):
            return ("answer", stripped[len(ANSWER_PREFIX):].strip())
        return ("code", text)

    @staticmethod
    def observe(obs: Any) -> dict[str, Any]:
        return {"task": obs.task, "turn": obs.turn, "stdout": obs.stdout[-200:], "error_type": obs.error_type,
                "error_message": obs.error_message, "timed_out": obs.timed_out}

    def episode_metrics(self, episodes: list[Episode]) -> dict[str, float]:
        n = max(len(episodes), 1)
        turns = sum(len(ep.responses) for ep in episodes)
        return {**_rates(episodes, self.outcomes),
                "answered_rate": sum(ep.outcome in ("solved", "partial", "wrong") for ep in episodes) / n,
                "code_turns_per_episode": sum(sum(not t.strip().startswith(ANSWER_PREFIX) for t in ep.texts) for ep in episodes) / n,
                "turns_per_episode": turns / n}


def make_codec(env_type: str, tokenizer: Any, max_seq_len: int, max_tokens: int) -> BlackjackCodec | CodeCodec:
    if env_type == "code":
        return CodeCodec(tokenizer, max_seq_len - max_tokens)
    return BlackjackCodec(tokenizer)
