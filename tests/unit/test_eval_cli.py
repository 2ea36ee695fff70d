import json
import subprocess
import sys

import pytest

from rlsvc.envs.blackjack import BlackjackObservation
from rlsvc.eval import CheckpointError, TablePolicy, all_states, evaluate, load_policy


def test_missing_checkpoint_is_one_line_exit_2(tmp_path):
    out = subprocess.run([sys.executable, "-m", "rlsvc.eval", "--checkpoint", str(tmp_path / "nope")], capture_output=True, text=True)
    assert out.returncode == 2 and "checkpoint folder not found" in out.stderr and out.stderr.strip().count("\n") == 0
    with pytest.raises(CheckpointError, match="no config.json"):
        load_policy(tmp_path)


def test_one_checkpoint_error_for_training_and_evaluation():
    """`rlsvc.train --resume` and `rlsvc.eval` refuse a checkpoint with the same error class."""
    from rlsvc.checkpoint import CheckpointError as TrainingCheckpointError

    assert CheckpointError is TrainingCheckpointError


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from rlsvc.config import TitanModelConfig
    from rlsvc.models.hf_export import save_hf_checkpoint, to_hf_state_dict
    from rlsvc.models.titan import build_model

    cfg = TitanModelConfig()
    folder = tmp_path_factory.mktemp("ckpt") / "checkpoint"
    save_hf_checkpoint(folder, to_hf_state_dict(build_model(cfg, seed=3).state_dict(), cfg), cfg)
    return folder


def test_load_policy_act_contract(checkpoint):
    policy = load_policy(checkpoint)
    obs = [
        BlackjackObservation(player_sum=15, dealer_card=10, usable_ace=False),
        BlackjackObservation(player_sum=20, dealer_card=1, usable_ace=True),
    ]
    acts = policy.act(obs)
    assert len(acts) == 2 and set(acts) <= {"hit", "stand"}
    assert policy.act(obs) == acts  # greedy is deterministic


def test_evaluate_reproduces_stick_at_17():
    table = {tuple(v): "hit" if v.player_sum < 17 else "stand" for v in all_states()}
    res = evaluate(TablePolicy(table), 40000, seed=7)
    assert res["mean_return"] == pytest.approx(-0.0759, abs=3 * 0.95 / 40000**0.5)
    assert res["win_rate"] + res["push_rate"] + res["loss_rate"] == pytest.approx(1.0)


class GameByGame:
    """The same table, not a `TablePolicy`: `evaluate` plays it game by game."""

    def __init__(self, table: dict) -> None:
        self.table = table

    def act(self, observations, greedy=True, seed=None):
        return [self.table[(o.player_sum, o.dealer_card, bool(o.usable_ace))] for o in observations]


@pytest.mark.parametrize("then_stick_at", [None, 17])
def test_a_table_policy_scores_exactly_as_playing_every_game(then_stick_at):
    """`evaluate` with a `TablePolicy` works on precomputed decision paths (rlsvc.eval.deal_paths);
    the returns must equal playing every game with the rules, for random tables and the references."""
    import random

    from rlsvc.envs.blackjack import optimal_policy, stick_at

    rng = random.Random(7)
    tables = [{tuple(s): rng.choice(["hit", "stand"]) for s in all_states()} for _ in range(3)]
    tables += [{tuple(s): p(s) for s in all_states()} for p in (optimal_policy(), stick_at(17), lambda v: "stand", lambda v: "hit")]
    for seed in (999, 4242):
        for table in tables:
            fast = evaluate(TablePolicy(table), 1500, seed, then_stick_at=then_stick_at)
            assert fast == evaluate(GameByGame(table), 1500, seed, then_stick_at=then_stick_at)


def test_prepare_validation_deals_the_validation_hands_once_for_every_validate():
    """The job calls `Task.prepare_validation` in a start-up thread; BlackJack's deals the
    validation hands there, and `validate` then plays on those very paths."""
    from rlsvc.eval import deal_paths
    from rlsvc.tasks import blackjack_eval as rlsvc_eval
    from rlsvc.tasks.blackjack import BlackjackTask

    assert (700, 31337) not in rlsvc_eval._PATHS
    BlackjackTask().prepare_validation(700, 31337)
    assert (700, 31337) in rlsvc_eval._PATHS
    paths = deal_paths(700, 31337)
    assert deal_paths(700, 31337) is paths and paths.states.shape[0] == 700


def test_rlsvc_eval_of_a_bare_blackjack_folder_is_the_exact_deal_evaluation(checkpoint, capsys):
    """A Hugging Face folder with no run around it is read as BlackJack's, evaluated through
    `BlackjackTask.evaluate`: the same numbers as `evaluate(load_policy(DIR), ...)`."""
    from rlsvc.eval import main

    assert main(["--checkpoint", str(checkpoint), "--episodes", "300", "--seed", "4"]) == 0
    assert json.loads(capsys.readouterr().out) == evaluate(load_policy(checkpoint), 300, 4)
