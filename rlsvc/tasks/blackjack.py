"""BlackJack as a task: the state as a short prompt, HIT or STAND as the answer, the game's
return as the reward, an exact greedy evaluator over every state, and a format warm start.

Two prompt formats: words (`blackjack/v1`, the built-in tokenizer: one token per answer) and
chat (`blackjack/chat-v1`, `env.chat`, pretrained chat models: a system and a user message,
answers `<answer>hit</answer>` / `<answer>stand</answer>` ending at the end-of-turn token)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from rlsvc.buffer.replay import Episode
from rlsvc.envs.blackjack import (
    CHAT_SYSTEM,
    HandView,
    chat_answer,
    format_chat_state,
    format_prompt,
    parse_action,
    parse_chat_action,
)
from rlsvc.saved_policy import CheckpointError, SavedPolicy, check_folder, read_meta
from rlsvc.task import EnvSpec, GreedyChooser, Prompt, Task, outcome_rates
from rlsvc.tasks.blackjack_eval import Policy, TablePolicy, all_states, deal_paths, evaluate

ANSWERS = ["HIT", "STAND"]
"""The words-mode answers."""
CHAT_ANSWERS = [chat_answer("hit"), chat_answer("stand")]
"""The chat-mode answers (canonical forms; `parse` accepts looser ones)."""
PROMPT_FORMATS = {"blackjack/v1": False, "blackjack/chat-v1": True}
"""The BlackJack prompt formats a checkpoint may name (rlsvc.json `prompt`) -> chat or not."""


class BlackjackTask(Task):
    name = "blackjack"
    outcomes = ("win", "push", "loss", "invalid", "truncated")

    def __init__(self, then_stick_at: int | None = None, chat: bool = False, system: str | None = None) -> None:
        self.then_stick_at = then_stick_at
        """Single-turn variant: after the policy's first decision stick-at-N plays the hand out."""
        self.chat = chat
        self.system = CHAT_SYSTEM if system is None else system
        """The system message of chat prompts."""
        self.prompt_format = "blackjack/chat-v1" if chat else "blackjack/v1"
        """Saved with checkpoints (rlsvc.json `prompt`): how `rlsvc.eval` must prompt them."""

    @classmethod
    def from_config(cls, env: Any) -> BlackjackTask:
        return cls(env.then_stick_at, chat=getattr(env, "chat", False), system=getattr(env, "system_prompt", None))

    def env_spec(self) -> EnvSpec:
        from rlsvc.envs.openenv_pool import blackjack_spec

        return blackjack_spec(self.then_stick_at)

    def render(self, observation: Any) -> Prompt:
        if self.chat:
            return [{"role": "system", "content": self.system}, {"role": "user", "content": format_chat_state(observation)}]
        return format_prompt(observation)

    def render_next(self, observation: Any) -> str:
        """The state after the previous action (the rules were said once, at the start)."""
        return format_chat_state(observation) if self.chat else format_prompt(observation)

    def parse(self, text: str) -> str | None:
        return parse_chat_action(text) if self.chat else parse_action(text)

    def answers(self) -> list[str]:
        return list(CHAT_ANSWERS if self.chat else ANSWERS)

    def prompt_key(self, observation: Any) -> tuple:
        return (observation.player_sum, observation.dealer_card, bool(observation.usable_ace))  # ~300 states

    def observe(self, observation: Any) -> dict[str, Any]:
        return {k: getattr(observation, k) for k in ("player_sum", "dealer_card", "usable_ace")}

    def metrics(self, episodes: list[Episode]) -> dict[str, float]:
        decisions = sum(len(ep.responses) for ep in episodes)
        return {
            **outcome_rates(episodes, self.outcomes),
            "hit_rate": sum(self.parse(t) == "hit" for ep in episodes for t in ep.texts) / max(decisions, 1),
        }

    def warm_start_examples(self, rng: random.Random, n: int) -> list[tuple[Any, str]]:
        """Random states, each with a random answer of this mode: the format only, no strategy."""
        states = [HandView(rng.randint(4, 21), rng.randint(1, 10), rng.random() < 0.2) for _ in range(n)]
        answers = self.answers()
        return [(s, rng.choice(answers)) for s in states]

    def validate(self, choose: GreedyChooser, episodes: int, seed: int) -> float:
        """The greedy policy is a table over ~280 states: ask the trainer once per state, then
        play `episodes` deals by the plain rules."""
        states = all_states()
        answers = self.answers()
        picks = choose(states, answers)
        table = {tuple(s): str(self.parse(answers[i])) for s, i in zip(states, picks)}
        return evaluate(TablePolicy(table), episodes, seed, then_stick_at=self.then_stick_at)["mean_return"]

    def prepare_validation(self, episodes: int, seed: int) -> None:
        """Deal the validation hands (0.7 s for 20000 in Python); kept for every `validate`."""
        deal_paths(episodes, seed)

    def reference_returns(self, episodes: int, seed: int) -> dict[str, float]:
        """The optimal policy, stick-at-17 and always-stand, each played as a table like `validate`."""
        from rlsvc.envs.blackjack import optimal_policy, stick_at

        policies = {"optimal": optimal_policy(), "stick at 17": stick_at(17), "always stand": lambda view: "stand"}
        return {
            name: evaluate(TablePolicy({tuple(s): policy(s) for s in all_states()}), episodes, seed, then_stick_at=self.then_stick_at)[
                "mean_return"
            ]
            for name, policy in policies.items()
        }

    def evaluate(self, checkpoint: Path, episodes: int, seed: int) -> dict[str, float]:
        return evaluate(load_policy(checkpoint), episodes, seed, then_stick_at=self.then_stick_at)


def load_policy(directory: str | Path, device: str = "cpu") -> Policy:
    """The BlackJack policy saved in `directory` by `rlsvc.train` (or any HF causal LM with its
    tokenizer), prompted as its rlsvc.json says (words when it has none):
    `load_policy(DIR).act([observation, ...])` -> ["hit", "stand", ...]."""
    folder = Path(directory)
    check_folder(folder)
    chat, system = _chat_format(folder)
    saved = SavedPolicy.load(folder, device)
    return Policy(saved.model, saved.tokenizer, device, BlackjackTask(chat=chat, system=system))


def _chat_format(folder: Path) -> tuple[bool, str | None]:
    """Whether the checkpoint was trained on chat prompts, and with which system message, from its
    rlsvc.json; a checkpoint of another task is refused rather than played with prompts it never saw."""
    meta, meta_file = read_meta(folder), folder / "rlsvc.json"
    if meta.get("task", "blackjack") != "blackjack":
        raise CheckpointError(f"not a BlackJack checkpoint (task {meta['task']!r} in {meta_file})")
    prompt = meta.get("prompt", "blackjack/v1")
    if prompt not in PROMPT_FORMATS:
        raise CheckpointError(f"unknown prompt format {prompt!r} in {meta_file}; expected one of {', '.join(PROMPT_FORMATS)}")
    return PROMPT_FORMATS[prompt], meta.get("system_prompt")
