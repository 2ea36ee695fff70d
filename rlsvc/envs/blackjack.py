"""BlackJack with Gymnasium `Blackjack-v1` rules (`sab=True`), as plain code and as an OpenEnv env.

The plain rules (`BlackjackGame`, `play_episode`, the reference policies, the policy's texts
`format_prompt`/`parse_action` and their chat forms) import nothing heavy, so rollout and reward
code can use them freely. The OpenEnv classes (`BlackjackAction`, `BlackjackObservation`,
`BlackjackState`, `BlackjackEnvironment`) are built on first access, because `import
openenv.core` loads gradio and takes several seconds.

Rules, matching Gymnasium: infinite deck (draws with replacement from 1..10 plus three more 10s,
ace = 1); the dealer is dealt first, then the player; the observation shows the dealer's first card;
the dealer hits while its sum (usable ace counted as 11) is below 17; with Sutton & Barto rules a
player natural beats a dealer non-natural (+1) and a natural against a natural is a push.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

from rlsvc.envs.lazy import lazy_classes

ActionName = Literal["hit", "stand"]
Outcome = Literal["win", "push", "loss"]
CardSource = Callable[[], int]

DECK: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 10, 10, 10)
DEALER_STANDS_AT = 17

# ---------------------------------------------------------------------------------------------
# Plain rules
# ---------------------------------------------------------------------------------------------


def seeded_cards(seed: int | None) -> CardSource:
    """Card source for one episode: one generator serves every card of that episode."""
    rng = random.Random(seed)
    return lambda: rng.choice(DECK)


class RememberedCards:
    """The cards of `seeded_cards(seed)`, kept as drawn: a later game from the same seed replays
    them and draws from the generator (seeded again, fast-forwarded) only past what earlier games
    used. Evaluation plays the same validation deals every few steps; replaying skips seeding and
    drawing 40,000 generators each time. `forget_generator` frees the generator's state (about
    2.5 kB) once a round of games is over; the cards stay."""

    __slots__ = ("seed", "cards", "_rng")

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.cards: list[int] = []
        self._rng: random.Random | None = None

    def source(self) -> CardSource:
        """A card source for one game: the remembered cards in order, then new draws."""
        position = 0

        def draw() -> int:
            nonlocal position
            if position == len(self.cards):
                if self._rng is None:
                    self._rng = random.Random(self.seed)
                    for _ in self.cards:  # fast-forward past the cards already remembered
                        self._rng.choice(DECK)
                self.cards.append(self._rng.choice(DECK))
            position += 1
            return self.cards[position - 1]

        return draw

    def forget_generator(self) -> None:
        self._rng = None


DEALER_STREAM = 0x9E3779B9  # offsets the dealer's generator from the player's


def seeded_game(seed: int | None) -> BlackjackGame:
    """A seeded deal with two card streams, one for the player and one for the dealer.

    Every card is still an independent draw from the infinite deck, so the game is Gymnasium's;
    but the dealer's hand no longer depends on how many cards the player took. Episodes of a
    GRPO group (same seed) that hit and that stand then face the same dealer hand, and their
    returns differ only through the decisions: common random numbers for the advantages.
    """
    dealer_seed = None if seed is None else seed + DEALER_STREAM
    return BlackjackGame(seeded_cards(seed), seeded_cards(dealer_seed))


def remembered_game(player: RememberedCards, dealer: RememberedCards) -> BlackjackGame:
    """`seeded_game(player.seed)` (with `dealer.seed == player.seed + DEALER_STREAM`), its cards
    replayed from memory where earlier games drew them."""
    return BlackjackGame(player.source(), dealer.source())


def scripted_cards(cards: Iterable[int]) -> CardSource:
    """Card source that deals `cards` in order (for hand-built test hands)."""
    it: Iterator[int] = iter(cards)
    return lambda: next(it)


def usable_ace(hand: list[int]) -> bool:
    """True when an ace in `hand` can count as 11 without busting."""
    return 1 in hand and sum(hand) + 10 <= 21


def sum_hand(hand: list[int]) -> int:
    """Hand total, counting one usable ace as 11."""
    total = sum(hand)
    return total + 10 if 1 in hand and total + 10 <= 21 else total


def is_natural(hand: list[int]) -> bool:
    """A two-card 21 (ace plus a ten-valued card)."""
    return sorted(hand) == [1, 10]


def _score(hand: list[int]) -> int:
    total = sum_hand(hand)
    return 0 if total > 21 else total


def _outcome(reward: float) -> Outcome:
    return "win" if reward > 0 else "loss" if reward < 0 else "push"


class HandView(NamedTuple):
    """What the player sees: the same three values as Gymnasium's observation tuple."""

    player_sum: int
    dealer_card: int
    usable_ace: bool


class HandLike(Protocol):
    """Anything carrying the player's view (a `HandView` or a `BlackjackObservation`)."""

    @property
    def player_sum(self) -> int: ...
    @property
    def dealer_card(self) -> int: ...
    @property
    def usable_ace(self) -> bool: ...


@dataclass
class BlackjackGame:
    """One episode; `draw` supplies every card, the dealer's two first, then the player's two.

    With `dealer_draw`, the dealer's cards come from that source instead (see `seeded_game`).
    """

    draw: CardSource
    dealer_draw: CardSource | None = None
    dealer: list[int] = field(default_factory=list)
    player: list[int] = field(default_factory=list)
    done: bool = False
    reward: float = 0.0

    def __post_init__(self) -> None:
        if not self.dealer and not self.player:
            self.dealer = [self._dealer_card(), self._dealer_card()]
            self.player = [self.draw(), self.draw()]

    def _dealer_card(self) -> int:
        return (self.dealer_draw or self.draw)()

    def view(self) -> HandView:
        """The player's observation."""
        return HandView(sum_hand(self.player), self.dealer[0], usable_ace(self.player))

    @property
    def outcome(self) -> Outcome | None:
        """ "win"/"push"/"loss" once the episode is over, else None."""
        return _outcome(self.reward) if self.done else None

    def step(self, action: ActionName) -> float:
        """Apply `action`; returns this step's reward (non-zero only when the episode ends)."""
        if self.done:
            raise RuntimeError("episode is over; reset before stepping")
        if action == "hit":
            self.player.append(self.draw())
            if sum_hand(self.player) > 21:
                self.done, self.reward = True, -1.0
        elif action == "stand":
            self._finish()
        else:
            raise ValueError(f"unknown action {action!r}; expected 'hit' or 'stand'")
        return self.reward

    def _finish(self) -> None:
        while sum_hand(self.dealer) < DEALER_STANDS_AT:
            self.dealer.append(self._dealer_card())
        player, dealer = _score(self.player), _score(self.dealer)
        reward = float(player > dealer) - float(player < dealer)
        # Sutton & Barto: a natural beats any dealer hand that is not itself a natural.
        if is_natural(self.player) and not is_natural(self.dealer):
            reward = 1.0
        self.done, self.reward = True, reward


Policy = Callable[[HandLike], ActionName]


def stick_at(threshold: int) -> Policy:
    """Hit while the player's sum is below `threshold`, then stand."""
    return lambda view: "hit" if view.player_sum < threshold else "stand"


def optimal_policy() -> Policy:
    """The policy of highest expected return under these rules, by dynamic programming over the
    infinite deck: stand when the player's total beats the dealer's final-total distribution at
    least as well as hitting does. (A state's future depends only on the observed total and
    whether an ace is usable: an ace that is not usable can never become usable.)"""
    card_p = {c: DECK.count(c) / len(DECK) for c in set(DECK)}
    table: dict[tuple[int, int, bool], tuple[ActionName, float]] = {}

    def total(hard: int, ace: bool) -> int:
        return hard + 10 if ace and hard + 10 <= 21 else hard

    def dealer_finals(hard: int, ace: bool) -> dict[int, float]:
        """Distribution of the dealer's final total (22 = bust) from a hand of this hard total."""
        if total(hard, ace) >= DEALER_STANDS_AT:
            return {min(total(hard, ace), 22): 1.0}
        out: dict[int, float] = {}
        for c, p in card_p.items():
            for t, q in dealer_finals(hard + c, ace or c == 1).items():
                out[t] = out.get(t, 0.0) + p * q
        return out

    finals = {d: dealer_finals(d, d == 1) for d in range(1, 11)}  # the up card, then the hole card onwards

    def stand(player: int, d: int) -> float:
        return sum(q * ((player > t or t == 22) - (player < t and t != 22)) for t, q in finals[d].items())

    def value(hard: int, ace: bool, d: int) -> float:
        if hard > 21:
            return -1.0
        key = (total(hard, ace), d, ace and hard + 10 <= 21)
        if key not in table:
            hit, keep = sum(p * value(hard + c, ace or c == 1, d) for c, p in card_p.items()), stand(key[0], d)
            table[key] = ("hit", hit) if hit > keep else ("stand", keep)
        return table[key][1]

    for d in range(1, 11):
        for hard in range(2, 22):
            value(hard, False, d)
            value(hard, True, d)
    return lambda view: table[(view.player_sum, view.dealer_card, bool(view.usable_ace))][0]


def uniform_random_policy(seed: int | None = None) -> Policy:
    """Hit or stand with probability 1/2 each, from its own generator (not the deck's)."""
    rng = random.Random(seed)
    return lambda view: "hit" if rng.random() < 0.5 else "stand"


def play_episode(policy: Policy, seed: int | None, cards: CardSource | None = None) -> float:
    """Play one episode with the plain rules and return its total reward."""
    return finish_hand(BlackjackGame(cards) if cards is not None else seeded_game(seed), policy)


def finish_hand(game: BlackjackGame, policy: Policy) -> float:
    """Play `game` on with `policy` until it ends; its return."""
    while not game.done:
        game.step(policy(game.view()))
    return game.reward


def first_decision_return(seed: int, action: ActionName, then_stick_at: int) -> float:
    """Single-turn BlackJack: the return of the deal `seed` when the first decision is `action`
    and stick-at-`then_stick_at` plays the rest of the hand. The OpenEnv environment with
    `then_stick_at` plays exactly this (benchmarks/vs_trl.py scores TRL's completions with it)."""
    game = seeded_game(seed)
    game.step(action)
    return finish_hand(game, stick_at(then_stick_at))


# ---------------------------------------------------------------------------------------------
# Text interface of the LM policy (words from rlsvc.models.tokenizer.VOCAB)
# ---------------------------------------------------------------------------------------------

_ACTION_WORDS: dict[str, ActionName] = {
    "HIT": "hit",
    "STAND": "stand",
    "hit": "hit",
    "stand": "stand",
}


def format_prompt(obs: HandLike) -> str:
    """The policy's prompt for one decision."""
    ace = "yes" if obs.usable_ace else "no"
    return f"player {obs.player_sum} dealer {obs.dealer_card} ace {ace} action :"


def parse_action(text: str) -> ActionName | None:
    """Map the policy's answer to an action; None when it is not exactly one action word."""
    return _ACTION_WORDS.get(text.strip())


# Chat mode (`env.chat`, pretrained chat models): the rules in a short system message, the state
# as a short user message, the answer as a tag. The texts are kept short on purpose: every token
# of them is in every prompt a small model trains on.

CHAT_SYSTEM = "Blackjack. Answer <answer>hit</answer> or <answer>stand</answer>."
"""The system message of chat mode."""

# Whitespace and case inside the tag are tolerated; only hit and stand are actions.
_CHAT_ACTION = re.compile(r"<\s*answer\s*>\s*(hit|stand)\s*<\s*/\s*answer\s*>", re.IGNORECASE)


def chat_answer(action: ActionName) -> str:
    """The canonical chat answer for `action` (what the warm start and evaluators score)."""
    return f"<answer>{action}</answer>"


def format_chat_state(obs: HandLike) -> str:
    """The user message of chat mode: the player's total (soft when an ace counts 11) and the
    dealer's shown card."""
    soft = " (soft)" if obs.usable_ace else ""
    dealer = "ace" if obs.dealer_card == 1 else str(obs.dealer_card)
    return f"Hand {obs.player_sum}{soft}, dealer {dealer}."


def parse_chat_action(text: str) -> ActionName | None:
    """The action of the last `<answer>hit|stand</answer>` tag in `text`; None when there is
    none (a model that thinks aloud first is judged by its final tag)."""
    tags = _CHAT_ACTION.findall(text)
    return _ACTION_WORDS[tags[-1].lower()] if tags else None


# ---------------------------------------------------------------------------------------------
# OpenEnv classes, built lazily (see module docstring)
# ---------------------------------------------------------------------------------------------

_OPENENV_NAMES = (
    "BlackjackAction",
    "BlackjackObservation",
    "BlackjackState",
    "BlackjackEnvironment",
)


def _build_openenv_classes() -> dict[str, type]:
    types = _build_types()
    return {**types, "BlackjackEnvironment": _build_environment(types)}


def _build_types() -> dict[str, type]:
    from openenv.core.env_server.types import Action, Observation, State

    class BlackjackAction(Action):
        """The player's move."""

        action: ActionName

    class BlackjackObservation(Observation):
        """The player's view plus OpenEnv's `done`/`reward`; `outcome` is set once done.

        `outcome` is a field, not metadata, because OpenEnv's serializer drops `metadata`.
        """

        player_sum: int
        dealer_card: int
        usable_ace: bool
        outcome: Outcome | None = None

    class BlackjackState(State):
        """Full episode state, including the dealer's hidden card (for debugging and tests)."""

        seed: int | None = None
        player_cards: list[int] = []
        dealer_cards: list[int] = []
        done: bool = False

    return {"BlackjackAction": BlackjackAction, "BlackjackObservation": BlackjackObservation, "BlackjackState": BlackjackState}


def _build_environment(types: dict[str, type]) -> type:
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Observation, State

    observation_cls, state_cls = types["BlackjackObservation"], types["BlackjackState"]

    class BlackjackEnvironment(Environment[Any, Any, Any]):  # BlackjackAction, BlackjackObservation, BlackjackState
        """OpenEnv environment over `BlackjackGame`; one instance per WebSocket session."""

        # Instances share nothing, so the server may hold many sessions at once.
        SUPPORTS_CONCURRENT_SESSIONS = True
        # Single-turn variant (`single_turn`): after the policy's first decision, stick-at-N
        # plays the rest of the hand, so every episode is one decision.
        THEN_STICK_AT: int | None = None

        @classmethod
        def single_turn(cls, then_stick_at: int) -> type:
            """This environment, with every hand finished by stick-at-`then_stick_at` after the
            policy's first decision (a class, so OpenEnv can read its concurrency flags)."""
            return type(f"{cls.__name__}StickAt{then_stick_at}", (cls,), {"THEN_STICK_AT": then_stick_at})

        # The server gives each session its own thread for sync calls; with the async overrides
        # below only construction and close() use it, so one shared thread avoids a thread per
        # session (hundreds in the pool).
        REQUIRES_SINGLE_THREAD_EXECUTOR = True

        def __init__(self) -> None:
            super().__init__()
            self._game: BlackjackGame | None = None
            self._state = state_cls()

        def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Observation:
            self._game = seeded_game(seed)
            self._state = state_cls(episode_id=episode_id, seed=seed)
            # Gymnasium gives no reward at reset.
            return self._observe(reward=None)

        def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
            if self._game is None:
                raise RuntimeError("call reset before step")
            reward = self._game.step(action.action)
            if self.THEN_STICK_AT is not None:
                reward = finish_hand(self._game, stick_at(self.THEN_STICK_AT))
            self._state.step_count += 1
            return self._observe(reward=reward)

        # A step takes microseconds: running it on the event loop beats the server's default
        # hop to a worker thread, which otherwise dominates the cost of each message.
        async def reset_async(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Observation:
            return self.reset(seed=seed, episode_id=episode_id)

        async def step_async(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
            return self.step(action)

        @property
        def state(self) -> State:
            if self._game is not None:
                self._state.player_cards = list(self._game.player)
                self._state.dealer_cards = list(self._game.dealer)
                self._state.done = self._game.done
            return self._state

        def _observe(self, reward: float | None) -> Observation:
            assert self._game is not None
            game = self._game
            view = game.view()
            return observation_cls(
                player_sum=view.player_sum,
                dealer_card=view.dealer_card,
                usable_ace=view.usable_ace,
                done=game.done,
                reward=reward,
                outcome=game.outcome,
            )

    return BlackjackEnvironment


__getattr__ = lazy_classes(__name__, _OPENENV_NAMES, _build_openenv_classes)
