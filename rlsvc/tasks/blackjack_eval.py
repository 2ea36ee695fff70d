"""BlackJack's exact evaluation: a policy (a causal LM choosing between the task's two answers, or
a table state -> action) played on seeded deals by the plain rules, every distinct state asked
once; a table over every state plays all deals at once with tensor operations (`deal_paths`,
`table_rewards`). `BlackjackTask.validate`, `.evaluate` and `.reference_returns` use it, and
`rlsvc.eval` re-exports its public names.

The LM policy's action is the more likely of the task's two answers, greedy by default, so every
decision is a legal move: with one token per answer (the words prompt, HIT / STAND), the more
likely token at the answer position; otherwise (a chat checkpoint: `<answer>hit</answer>` and the
end-of-turn token) the answer whose tokens have the larger summed logprob after the prompt.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from typing import Any, cast

from rlsvc.envs.blackjack import (
    DEALER_STREAM,
    ActionName,
    BlackjackGame,
    HandView,
    RememberedCards,
    finish_hand,
    remembered_game,
    scripted_cards,
    stick_at,
)
from rlsvc.policy_io import TaskCodec
from rlsvc.task import Task

ACTIONS = ("hit", "stand")
SCORE_ROWS = 32
"""Rows (prompt + answer) per forward pass when answers are scored whole: bounds memory."""


class Policy:
    """A BlackJack policy from a causal LM: observations in, "hit"/"stand" out."""

    def __init__(self, model: Any, tokenizer: Any, device: str, task: Task) -> None:
        """`task`: the BlackJack task (`rlsvc.tasks.blackjack.BlackjackTask`) in the prompt
        format the model was trained with; `load_policy` reads it off the checkpoint."""
        self.model, self.device = model, device
        self.task = task
        self.codec = TaskCodec(self.task, tokenizer)
        self.answers: list[str] = self.task.answers() or []
        self.actions = [cast(ActionName, self.task.parse(a)) for a in self.answers]  # ACTIONS, in the answers' order
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

    def answer_scores(self, observations: list[Any]) -> Any:
        """[N, answers] summed logprobs of each answer's tokens (with the end-of-turn token in
        chat) after each prompt. Rows are prompt + answer, right-padded, so every real token
        keeps the position it has unpadded."""
        import torch

        prompts = [self.codec.encode(o) for o in observations]
        answers = [self.codec.answer_ids(a) for a in self.answers]
        rows = [(p, a) for p in prompts for a in answers]  # observation-major: row i*C + c
        sums: list[Any] = []
        for start in range(0, len(rows), SCORE_ROWS):
            chunk = rows[start : start + SCORE_ROWS]
            width = max(len(p) + len(a) for p, a in chunk)
            ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
            attn = torch.zeros_like(ids)
            for r, (p, a) in enumerate(chunk):
                ids[r, : len(p) + len(a)] = torch.tensor(p + a)
                attn[r, : len(p) + len(a)] = 1
            with torch.no_grad():
                logits = self.model(input_ids=ids.to(self.device), attention_mask=attn.to(self.device)).logits
            for r, (p, a) in enumerate(chunk):
                # the answer's tokens are predicted at the positions just before them; only those
                # rows of the (vocabulary-wide) logits are normalised
                lp = logits[r, len(p) - 1 : len(p) + len(a) - 1].float().log_softmax(-1).cpu()
                sums.append(lp.gather(-1, torch.tensor(a).unsqueeze(-1)).sum())
        return torch.stack(sums).view(len(prompts), len(answers))

    def act(self, observations: list[Any], greedy: bool = True, seed: int | None = None) -> list[str]:
        """One action ("hit"/"stand") per observation: the greedy answer, or one sampled from
        the softmax over the answers' scores."""
        import torch

        if not observations:
            return []
        if self.codec.allowed_token_ids is not None:
            scores = self.action_logits(list(observations))
            best = scores.argmax(dim=-1)
        else:
            scores = self.answer_scores(list(observations))
            # ties go to the last answer, as the trainer's greedy chooser does (rlsvc/loop.py)
            best = len(self.answers) - 1 - scores.flip(1).argmax(dim=-1)
        if greedy:
            choice = best
        else:
            gen = torch.Generator().manual_seed(seed if seed is not None else 0)
            choice = torch.multinomial(torch.softmax(scores, -1), 1, generator=gen).squeeze(-1)
        return [self.actions[int(c)] for c in choice]


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


_DEALS: dict[tuple[int, int], list[tuple[RememberedCards, RememberedCards]]] = {}
_DEALS_KEPT = 4  # validation deals, final evaluation deals, and room for a caller's own


def remembered_deals(episodes: int, seed: int) -> list[tuple[RememberedCards, RememberedCards]]:
    """The card streams (player, dealer) of deals `seeded_game(seed * 1_000_003 + i)`, i <
    `episodes`, kept for the process's next evaluation on the same deals (a few sets at most)."""
    key = (episodes, seed)
    if key not in _DEALS:
        if len(_DEALS) >= _DEALS_KEPT:
            del _DEALS[next(iter(_DEALS))]
        seeds = [seed * 1_000_003 + i for i in range(episodes)]
        _DEALS[key] = [(RememberedCards(s), RememberedCards(s + DEALER_STREAM)) for s in seeds]
    return _DEALS[key]


@dataclass(frozen=True)
class DealPaths:
    """Every decision the deals `remembered_deals(episodes, seed)` can ask, worked out once.

    Deal d's player hand after k hits is in state `states[d, k]` (an index into `all_states()`;
    -1 past the hit that busts it), with total `sums[d, k]`; standing there returns `stand[d, k]`.
    The dealer draws from its own card stream, so its final hand does not depend on the player's
    decisions. A table policy's return on every deal is then a lookup and a first-stand search
    over these arrays (`table_rewards`) instead of playing 20,000 games in Python.
    """

    states: Any  # [deals, longest path] int64 (torch)
    sums: Any
    stand: Any  # float64


_PATHS: dict[tuple[int, int], DealPaths] = {}
_PATHS_LOCK = threading.Lock()  # a job deals them in a start-up thread (Task.prepare_validation)


def deal_paths(episodes: int, seed: int) -> DealPaths:
    """The paths of the deals (episodes, seed), kept for the process's next evaluation on them."""
    with _PATHS_LOCK:
        return _deal_paths(episodes, seed)


def _deal_paths(episodes: int, seed: int) -> DealPaths:
    import torch

    key = (episodes, seed)
    if key in _PATHS:
        return _PATHS[key]
    index = {tuple(s): i for i, s in enumerate(all_states())}
    rows: list[list[tuple[int, int, float]]] = []
    deals = remembered_deals(episodes, seed)
    for player, dealer in deals:
        game = remembered_game(player, dealer)
        probe = BlackjackGame(game.draw, game.dealer_draw, list(game.dealer), list(game.player))
        probe.step("stand")  # the dealer's final hand, the same whenever the player stands
        row = []
        while not game.done:
            standing = BlackjackGame(scripted_cards(()), None, list(probe.dealer), list(game.player))
            standing.step("stand")  # the dealer has finished: no card is drawn
            view = game.view()
            row.append((index[(view.player_sum, view.dealer_card, view.usable_ace)], view.player_sum, standing.reward))
            game.step("hit")
        rows.append(row)
    for player, dealer in deals:
        player.forget_generator()
        dealer.forget_generator()
    width = max(len(r) for r in rows)
    padded = [r + [(-1, 0, 0.0)] * (width - len(r)) for r in rows]
    paths = DealPaths(
        states=torch.tensor([[c[0] for c in r] for r in padded], dtype=torch.int64),
        sums=torch.tensor([[c[1] for c in r] for r in padded], dtype=torch.int64),
        stand=torch.tensor([[c[2] for c in r] for r in padded], dtype=torch.float64),
    )
    if len(_PATHS) >= _DEALS_KEPT:
        del _PATHS[next(iter(_PATHS))]
    _PATHS[key] = paths
    return paths


def table_rewards(paths: DealPaths, hit: Any, then_stick_at: int | None = None) -> Any:
    """Each deal's return under the table policy `hit` ([states] bool: hit in that state), with
    `then_stick_at` as in `evaluate`: the table's first decision, stick-at-N's after."""
    import torch

    valid = paths.states >= 0
    hits = torch.where(valid, hit[paths.states.clamp(min=0)], True)  # past a bust: no stand
    if then_stick_at is not None:
        hits[:, 1:] = torch.where(valid[:, 1:], paths.sums[:, 1:] < then_stick_at, True)
    stands = ~hits
    first = stands.to(torch.uint8).argmax(dim=1)  # the first decision that stands
    rows = torch.arange(len(first))
    return torch.where(stands[rows, first], paths.stand[rows, first], -1.0)  # never stood: bust


def evaluate(
    policy: Policy | TablePolicy, episodes: int, seed: int, greedy: bool = True, then_stick_at: int | None = None
) -> dict[str, float]:
    """Play `episodes` hands with the plain rules; deal i uses seed `seed`+i. Greedy decisions are
    a function of the state, so each distinct state is asked once; a `TablePolicy` over every
    state plays all deals at once (`table_rewards`). With `then_stick_at`, the single-turn task
    (`env.then_stick_at`): the policy decides first, stick-at-N plays on."""
    if greedy and isinstance(policy, TablePolicy) and all(tuple(s) in policy.table for s in all_states()):
        import torch

        hit = torch.tensor([policy.table[tuple(s)] == "hit" for s in all_states()])
        return _summary(table_rewards(deal_paths(episodes, seed), hit, then_stick_at).tolist(), episodes)
    deals = remembered_deals(episodes, seed)
    games = [remembered_game(player, dealer) for player, dealer in deals]
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
            g.step(cast(ActionName, a))
            if then_stick_at is not None and not g.done:
                finish_hand(g, stick_at(then_stick_at))
        live = [g for g in live if not g.done]
    for player, dealer in deals:
        player.forget_generator()
        dealer.forget_generator()
    return _summary([g.reward for g in games], episodes)


def _summary(rewards: list[float], episodes: int) -> dict[str, float]:
    n = max(episodes, 1)
    mean = sum(rewards) / n
    # the mean's standard error: how far the mean of another `episodes` deals would typically be
    variance = sum((r - mean) ** 2 for r in rewards) / max(n - 1, 1)
    return {
        "episodes": episodes,
        "mean_return": mean,
        "return_stderr": (variance / n) ** 0.5,
        "win_rate": sum(r > 0 for r in rewards) / n,
        "push_rate": sum(r == 0 for r in rewards) / n,
        "loss_rate": sum(r < 0 for r in rewards) / n,
    }
