"""Evaluate a trained BlackJack policy from its Hugging Face checkpoint folder.

CLI:    python -m rlsvc.eval --checkpoint DIR --episodes N --seed S   (prints JSON)
Python: policy = load_policy(DIR); policy.act([BlackjackObservation(...), ...]) -> ["hit", ...]

The action is read as the more likely of the two action tokens (HIT / STAND) at the answer
position, greedy by default, so every decision is a legal move.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

from rlsvc.envs.blackjack import HandView, finish_hand, seeded_game, stick_at

ACTIONS = ("hit", "stand")


class CheckpointError(ValueError):
    pass


class Policy:
    def __init__(self, model: Any, tokenizer: Any, device: str = "cpu") -> None:
        from rlsvc.policy_io import BlackjackCodec

        self.model, self.device = model, device
        self.codec = BlackjackCodec(tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    def action_logits(self, observations: list[Any]) -> Any:
        """[N, 2] logits of (HIT, STAND) at the answer position; prompts are left-padded."""
        import torch

        prompts = [self.codec.encode(o) for o in observations]
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p)
            attn[i, width - len(p) :] = 1
        with torch.no_grad():
            logits = self.model(input_ids=ids.to(self.device), attention_mask=attn.to(self.device)).logits[:, -1]
        return logits[:, self.codec.allowed_token_ids].float().cpu()

    def act(self, observations: list[Any], greedy: bool = True, seed: int | None = None) -> list[str]:
        import torch

        if not observations:
            return []
        logits = self.action_logits(list(observations))
        if greedy:
            choice = logits.argmax(dim=-1)
        else:
            gen = torch.Generator().manual_seed(seed if seed is not None else 0)
            choice = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen).squeeze(-1)
        return [ACTIONS[int(c)] for c in choice]


class TablePolicy:
    """A policy given as a table state -> action (e.g. a model's greedy choice in every state)."""

    def __init__(self, table: dict[tuple, str]) -> None:
        self.table = table

    def act(self, observations: list[Any], greedy: bool = True, seed: int | None = None) -> list[str]:
        return [self.table[(o.player_sum, o.dealer_card, bool(o.usable_ace))] for o in observations]


def all_states() -> list[HandView]:
    """Every state a BlackJack decision can be asked in: hard 4-21 and soft 12-21, dealer 1-10."""
    hard = [HandView(s, d, False) for s in range(4, 22) for d in range(1, 11)]
    soft = [HandView(s, d, True) for s in range(12, 22) for d in range(1, 11)]
    return hard + soft


def load_policy(directory: str | Path, device: str = "cpu") -> Policy:
    """Load a checkpoint folder written by `rlsvc.train` (or any HF causal LM with the tokenizer)."""
    folder = Path(directory)
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder not found: {folder}")
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"not a Hugging Face checkpoint (no config.json): {folder}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).to(device).eval()
    return Policy(model, AutoTokenizer.from_pretrained(str(folder)), device)


def evaluate(
    policy: Policy | TablePolicy, episodes: int, seed: int, greedy: bool = True, then_stick_at: int | None = None
) -> dict[str, float]:
    """Play `episodes` hands with the plain rules; deal i uses seed `seed`+i. Greedy decisions are
    a function of the state, so each distinct state is asked once. With `then_stick_at`, the
    single-turn task (`env.then_stick_at`): the policy decides first, stick-at-N plays on."""
    games = [seeded_game(seed * 1_000_003 + i) for i in range(episodes)]
    table: dict[tuple, str] = {}
    rng = random.Random(seed)
    live = games
    while live:
        views = [g.view() for g in live]
        if greedy:
            todo = sorted({v for v in views if v not in table})
            table.update(zip(todo, policy.act(todo)))
            actions = [table[v] for v in views]
        else:
            actions = policy.act(views, greedy=False, seed=rng.randrange(2**31))
        for g, a in zip(live, actions):
            g.step(a)
            if then_stick_at is not None and not g.done:
                finish_hand(g, stick_at(then_stick_at))
        live = [g for g in live if not g.done]
    n = max(episodes, 1)
    rewards = [g.reward for g in games]
    return {
        "episodes": episodes,
        "mean_return": sum(rewards) / n,
        "win_rate": sum(r > 0 for r in rewards) / n,
        "push_rate": sum(r == 0 for r in rewards) / n,
        "loss_rate": sum(r < 0 for r in rewards) / n,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlsvc.eval", description="Evaluate a BlackJack policy checkpoint (greedy).")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder printed by rlsvc.train")
    p.add_argument("--episodes", type=int, default=20000, help="episodes to play (default 20000)")
    p.add_argument("--seed", type=int, default=12345, help="seed of the deals")
    p.add_argument("--sample", action="store_true", help="sample actions instead of greedy")
    p.add_argument("--then-stick-at", type=int, default=None, help="single-turn task: the policy decides first, stick-at-N plays on")
    args = p.parse_args(argv)
    if args.episodes < 1:
        print("rlsvc.eval: --episodes must be >= 1", file=sys.stderr)
        return 2
    try:
        policy = load_policy(args.checkpoint)
    except CheckpointError as e:
        print(f"rlsvc.eval: {e}", file=sys.stderr)
        return 2
    print(json.dumps(evaluate(policy, args.episodes, args.seed, greedy=not args.sample, then_stick_at=args.then_stick_at)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
