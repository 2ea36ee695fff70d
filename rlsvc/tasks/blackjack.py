"""BlackJack as a task: the state as a short prompt, HIT or STAND as the answer, the game's
return as the reward, an exact greedy evaluator over every state, and a format warm start."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from rlsvc.buffer.replay import Episode
from rlsvc.envs.blackjack import HandView, format_prompt, parse_action
from rlsvc.task import GreedyChooser, Task, outcome_rates

ANSWERS = ["HIT", "STAND"]


class BlackjackTask(Task):
    name = "blackjack"
    prompt_format = "blackjack/v1"
    outcomes = ("win", "push", "loss", "invalid", "truncated")

    def __init__(self, then_stick_at: int | None = None) -> None:
        self.then_stick_at = then_stick_at
        """Single-turn variant: after the policy's first decision stick-at-N plays the hand out."""

    @classmethod
    def from_config(cls, env: Any) -> BlackjackTask:
        return cls(env.then_stick_at)

    def env_spec(self) -> Any:
        from rlsvc.envs.openenv_pool import blackjack_spec

        return blackjack_spec(self.then_stick_at)

    def render(self, observation: Any) -> str:
        return format_prompt(observation)

    def parse(self, text: str) -> str | None:
        return parse_action(text)

    def answers(self) -> list[str]:
        return list(ANSWERS)

    def prompt_key(self, observation: Any) -> tuple:
        return (observation.player_sum, observation.dealer_card, bool(observation.usable_ace))  # ~300 states

    def observe(self, observation: Any) -> dict[str, Any]:
        return {k: getattr(observation, k) for k in ("player_sum", "dealer_card", "usable_ace")}

    def metrics(self, episodes: list[Episode]) -> dict[str, float]:
        decisions = sum(len(ep.responses) for ep in episodes)
        return {
            **outcome_rates(episodes, self.outcomes),
            "hit_rate": sum(t.strip() == "HIT" for ep in episodes for t in ep.texts) / max(decisions, 1),
        }

    def warm_start_examples(self, rng: random.Random, n: int) -> list[tuple[Any, str]]:
        """Random states, each with a random HIT or STAND: the format only, no strategy."""
        states = [HandView(rng.randint(4, 21), rng.randint(1, 10), rng.random() < 0.2) for _ in range(n)]
        return [(s, rng.choice(ANSWERS)) for s in states]

    def validate(self, choose: GreedyChooser, episodes: int, seed: int) -> float:
        """The greedy policy is a table over ~280 states: ask the trainer once per state, then
        play `episodes` deals by the plain rules."""
        from rlsvc.eval import TablePolicy, all_states, evaluate

        states = all_states()
        picks = choose(states, ANSWERS)
        table = {tuple(s): ANSWERS[i].lower() for s, i in zip(states, picks)}
        return evaluate(TablePolicy(table), episodes, seed, then_stick_at=self.then_stick_at)["mean_return"]

    def evaluate(self, checkpoint: Path, episodes: int, seed: int) -> dict[str, float]:
        from rlsvc.eval import evaluate, load_policy

        return evaluate(load_policy(checkpoint), episodes, seed, then_stick_at=self.then_stick_at)
