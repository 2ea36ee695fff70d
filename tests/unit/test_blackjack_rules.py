"""BlackJack rules against hand-built deals and Gymnasium `Blackjack-v1` (sab=True) references."""

from __future__ import annotations

import math
import statistics
import subprocess
import sys

import pytest

from rlsvc.envs.blackjack import (
    BlackjackGame,
    HandView,
    format_prompt,
    parse_action,
    play_episode,
    scripted_cards,
    seeded_cards,
    stick_at,
    uniform_random_policy,
)

pytestmark = pytest.mark.unit


def deal(dealer: list[int], player: list[int], more: list[int] = ()) -> BlackjackGame:
    """A game whose deal is fixed: dealer's two cards, player's two, then `more` in order."""
    return BlackjackGame(scripted_cards([*dealer, *player, *more]))


def test_deal_order_and_view() -> None:
    game = deal([7, 10], [1, 5])
    assert game.dealer == [7, 10] and game.player == [1, 5]
    assert game.view() == HandView(player_sum=16, dealer_card=7, usable_ace=True)


def test_player_bust_loses_without_dealer_drawing() -> None:
    game = deal([10, 6], [10, 5], more=[9])
    assert game.step("hit") == -1.0
    assert game.done and game.outcome == "loss" and game.dealer == [10, 6]


def test_dealer_draws_to_17_and_busts() -> None:
    game = deal([10, 6], [10, 2], more=[8])
    assert game.step("stand") == 1.0
    assert game.dealer == [10, 6, 8] and game.outcome == "win"


def test_push_on_equal_totals() -> None:
    game = deal([10, 8], [9, 9])
    assert game.step("stand") == 0.0 and game.outcome == "push"


def test_dealer_stands_on_soft_17() -> None:
    game = deal([1, 6], [10, 8])
    assert game.step("stand") == 1.0
    assert game.dealer == [1, 6]


def test_dealer_soft_hand_becomes_hard() -> None:
    # A + 5 = soft 16 -> draws 10 -> hard 16 -> draws 5 -> 21.
    game = deal([1, 5], [10, 10], more=[10, 5])
    assert game.step("stand") == -1.0
    assert game.dealer == [1, 5, 10, 5]


def test_natural_beats_dealer_21_with_sab() -> None:
    game = deal([7, 4], [1, 10], more=[10])  # dealer reaches 21 with three cards
    assert game.step("stand") == 1.0


def test_natural_against_natural_is_push() -> None:
    game = deal([10, 1], [1, 10])
    assert game.step("stand") == 0.0


def test_natural_lost_after_hit() -> None:
    # Hitting a natural: 21 with three cards is no longer a natural and pushes dealer's 21.
    game = deal([7, 4], [1, 10], more=[10, 10])
    assert game.step("hit") == 0.0 and game.view().player_sum == 21
    assert game.step("stand") == 0.0


def test_usable_ace_turns_hard() -> None:
    game = deal([10, 7], [1, 6], more=[9])
    assert game.view() == HandView(17, 10, True)
    assert game.step("hit") == 0.0
    assert game.view() == HandView(16, 10, False) and not game.done


def test_two_aces_count_one_as_eleven() -> None:
    assert deal([10, 7], [1, 1]).view() == HandView(12, 10, True)


def test_step_after_done_raises() -> None:
    game = deal([10, 8], [9, 9])
    game.step("stand")
    with pytest.raises(RuntimeError):
        game.step("stand")


def test_same_seed_same_cards_for_same_actions() -> None:
    for seed in range(200):
        a, b = BlackjackGame(seeded_cards(seed)), BlackjackGame(seeded_cards(seed))
        for action in ("hit", "hit", "stand"):
            if a.done:
                break
            a.step(action)
            b.step(action)
        assert (a.dealer, a.player, a.reward) == (b.dealer, b.player, b.reward)


def test_seeds_give_different_deals() -> None:
    deals = {tuple(BlackjackGame(seeded_cards(s)).player) for s in range(50)}
    assert len(deals) > 10


def test_prompt_and_action_parsing() -> None:
    assert format_prompt(HandView(15, 10, False)) == "player 15 dealer 10 ace no action :"
    assert format_prompt(HandView(13, 1, True)) == "player 13 dealer 1 ace yes action :"
    assert parse_action(" HIT ") == "hit"
    assert parse_action("STAND") == "stand"
    assert parse_action("stand\n") == "stand"
    for bad in ("", "HIT STAND", "Hit", "fold", "<eos>"):
        assert parse_action(bad) is None


def test_plain_rules_do_not_import_openenv() -> None:
    # Rollout and reward code import the plain rules; openenv.core costs seconds to import.
    # in a fresh interpreter: other tests in this process may have imported openenv already
    probe = "import sys, rlsvc.envs.blackjack; print('openenv.core' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_openenv_classes_leave_out_the_web_ui() -> None:
    # The environment's OpenEnv classes are built without OpenEnv's Gradio UI (rlsvc/envs/lazy.py),
    # and gradio, and OpenEnv's UI module, still import afterwards for whoever wants them.
    probe = (
        "import sys; from rlsvc.envs.blackjack import BlackjackEnvironment; "
        "print('openenv.core' in sys.modules, 'gradio' in sys.modules); "
        "from openenv.core.env_server.web_interface import create_web_interface_app; "
        "print(callable(create_web_interface_app), 'gradio' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False", "True", "True"]


# Gymnasium Blackjack-v1 (sab=True) expected returns per episode.
@pytest.mark.parametrize(
    ("make_policy", "expected"),
    [(lambda: stick_at(17), -0.0759), (lambda: uniform_random_policy(seed=7), -0.3942)],
    ids=["stick_at_17", "uniform_random"],
)
def test_reference_returns(make_policy, expected: float) -> None:
    n = 200_000
    policy = make_policy()
    returns = [play_episode(policy, seed) for seed in range(n)]
    mean = sum(returns) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in returns) / (n - 1))
    assert abs(mean - expected) < 3 * std / math.sqrt(n), (mean, expected)


def test_optimal_policy_is_basic_strategy_and_beats_the_references() -> None:
    """The dynamic-programming policy makes the textbook infinite-deck decisions (dealer stands on
    soft 17, no doubling or splitting) and, on the same deals, beats stick-at-17, which beats
    always-stand."""
    from rlsvc.envs.blackjack import HandView, optimal_policy, stick_at
    from rlsvc.eval import TablePolicy, all_states, evaluate

    best = optimal_policy()
    assert [best(HandView(s, 10, False)) for s in range(12, 18)] == ["hit"] * 5 + ["stand"]  # hit 12-16 against a 10
    assert [best(HandView(s, 6, False)) for s in (12, 13, 16)] == ["stand"] * 3  # stand 12+ against a 6
    assert best(HandView(12, 2, False)) == best(HandView(12, 3, False)) == "hit"
    assert [best(HandView(s, 9, True)) for s in (17, 18, 19)] == ["hit", "hit", "stand"]  # soft 18 hits a 9
    assert best(HandView(11, 10, False)) == "hit" and best(HandView(20, 10, False)) == "stand"

    def score(policy) -> float:
        return evaluate(TablePolicy({tuple(s): policy(s) for s in all_states()}), 5000, 3)["mean_return"]

    assert score(best) > score(stick_at(17)) > score(lambda view: "stand")


def test_remembered_deals_replay_the_seeded_games_whatever_each_policy_draws():
    """Evaluation replays remembered cards: a policy that draws more cards than the ones before
    it (always-stand, then stick-at-20, then always-hit) still gets exactly `seeded_game`'s cards,
    and returns equal to playing fresh seeded games."""
    from rlsvc.envs.blackjack import finish_hand, seeded_game, stick_at
    from rlsvc.eval import TablePolicy, all_states, evaluate

    policies = [lambda view: "stand", stick_at(20), lambda view: "hit"]
    for policy in policies:
        table = TablePolicy({tuple(s): policy(s) for s in all_states()})
        fresh = [finish_hand(seeded_game(7 * 1_000_003 + i), policy) for i in range(500)]
        result = evaluate(table, 500, 7)
        assert result["mean_return"] == sum(fresh) / 500
        assert result["return_stderr"] == pytest.approx(statistics.stdev(fresh) / 500**0.5)
