"""Dynamic sampling, overlong shaping and truncated masking in the synchronous and asynchronous
loops, on the in-process fakes of test_grpo_loop.py (no Ray). A reward that is flat for the even
groups and spread for the odd ones makes the filter's work exact: half of every round is dropped."""

from __future__ import annotations

import pytest
import torch
from test_grpo_loop import B, FakeReward, G, make_loop

from rlsvc.algo.sampling import shape_overlong, signal_groups, truncated_rows
from rlsvc.async_loop import AsyncGRPOLoop
from rlsvc.episode import Episode
from rlsvc.loop import GRPOLoop


class HalfFlat(FakeReward):
    """Even groups: every episode 1.0 (no gradient); odd groups: 0, 1, 2, ... within the group."""

    def score(self, episodes):
        self.scored.append(list(episodes))
        seen: dict[int, int] = {}
        out = []
        for ep in episodes:
            i = seen[ep.group_id] = seen.get(ep.group_id, -1) + 1
            out.append(1.0 if ep.group_id % 2 == 0 else float(i))
        return out


def half_flat_loop(overrides=(), loop_cls=GRPOLoop):
    loop, svc, sync = make_loop(overrides=["grpo.dynamic_sampling=true", *overrides], loop_cls=loop_cls)
    svc.reward_client = HalfFlat()
    return loop, svc, sync


def trained_groups(batch_episodes: list[Episode]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for ep in batch_episodes:
        out.setdefault(ep.group_id, []).append(ep.reward)
    return out


def test_flat_groups_are_dropped_and_fresh_ones_played_until_the_batch_is_full():
    loop, svc, _ = half_flat_loop()
    metrics, played = loop.step(0)
    # round 1 keeps groups 1, 3; round 2 (batch 1: groups 4..7) keeps 5, 7: full after two rounds
    assert metrics["dynamic/rounds"] == 2.0 and metrics["dynamic/filtered_rate"] == 0.5
    assert metrics["dynamic/kept_groups"] == float(B) and metrics["dynamic/short"] == 0.0
    assert loop.trained_groups == [1, 3, 5, 7] and len(played) == 2 * B * G
    assert loop.sampling_offset == 1 and loop.version == 1 and loop.batch_index == 2
    assert all(len(set(trained_groups(played)[g])) > 1 for g in loop.trained_groups)  # every kept group has variance
    batch = svc.trainer_group.steps[0]
    assert batch.input_ids.shape[0] == sum(len(ep.responses) for ep in played if ep.group_id % 2)
    assert metrics["episodes_with_signal"] == float(B * G) and metrics["groups_with_signal"] == float(B)
    assert metrics["zero_variance_group_rate"] == 0.5  # over every group played
    # the next step starts after the refill: batch 2, new groups
    loop.step(1)
    assert loop.trained_groups == [9, 11, 13, 15] and loop.batch_index == 4


def test_the_round_cap_trains_on_what_was_kept_and_says_so():
    loop, svc, _ = half_flat_loop(["grpo.max_sampling_rounds=1"])
    metrics, played = loop.step(0)
    assert metrics["dynamic/rounds"] == 1.0 and metrics["dynamic/short"] == 1.0 and metrics["dynamic/kept_groups"] == 2.0
    assert loop.trained_groups == [1, 3] and loop.sampling_offset == 0 and len(played) == B * G


def test_without_dynamic_sampling_flat_groups_train_and_only_the_signal_count_shows_them():
    loop, svc, _ = make_loop()
    svc.reward_client = HalfFlat()
    metrics, _ = loop.step(0)
    assert loop.trained_groups == [0, 1, 2, 3] and not any(k.startswith("dynamic/") for k in metrics)
    assert metrics["episodes_with_signal"] == float(B * G / 2) and metrics["groups_with_signal"] == float(B / 2)


def test_the_asynchronous_loop_takes_refills_from_the_stream_within_the_staleness_bound():
    for k in (0, 1):
        loop, svc, _ = half_flat_loop([f"buffer.max_staleness={k}"], loop_cls=AsyncGRPOLoop)
        try:
            metrics = [loop.step(i)[0] for i in range(3)]
        finally:
            loop.close()
        assert [m["dynamic/rounds"] for m in metrics] == [2.0, 2.0, 2.0] and all(m["dynamic/filtered_rate"] == 0.5 for m in metrics)
        assert all(m["staleness_max"] <= k for m in metrics), k
        assert loop.sampling_offset == 3 and loop.version == 3
        steps = svc.trainer_group.steps
        assert len(steps) == 3
        assert loop.trained_groups == [17, 19, 21, 23]  # batches 4 and 5 (groups 16..23), odd ones


def test_a_resumed_loop_continues_after_the_refills_it_took():
    loop, _, _ = half_flat_loop()
    loop.step(0)
    fresh, _, _ = half_flat_loop()
    fresh.load_state_dict(loop.state_dict())
    assert fresh.batch_index == loop.batch_index == 2
    fresh.load_state_dict({"version": 3, "nonfinite_skipped": 0})  # written before dynamic sampling
    assert fresh.batch_index == 3


def test_the_overlong_penalty_lowers_rewards_before_the_advantages():
    loop, svc, _ = make_loop(["rollout.max_tokens=2", "grpo.overlong_buffer=1", "grpo.overlong_penalty=0.5"])
    metrics, played = loop.step(0)
    # the fake answers one token, within max_tokens - buffer = 1: no penalty
    assert metrics["overlong_penalty_mean"] == 0.0 and all(ep.reward == ep.env_return for ep in played)
    loop, svc, _ = make_loop(["rollout.max_tokens=1", "grpo.overlong_buffer=1", "grpo.overlong_penalty=0.5"])
    metrics, played = loop.step(0)
    assert metrics["overlong_penalty_mean"] == -0.5 and all(ep.reward == ep.env_return - 0.5 for ep in played)


def test_shape_overlong_follows_dapo_per_episode_by_its_longest_answer():
    eps = [Episode(0, 0, responses=[[1] * n, [1] * m]) for n, m in ((2, 3), (6, 1), (7, 8), (9, 10))]
    mean = shape_overlong(eps, max_tokens=8, buffer=4, factor=2.0)
    # longest 3: free; 6: (4 - 6) / 4 = -0.5; 8: (4 - 8) / 4 = -1; 10 > 8: -1; times 2
    assert [ep.reward for ep in eps] == [0.0, -1.0, -2.0, -2.0] and mean == pytest.approx(-1.25)


def test_truncated_episodes_carry_no_loss_with_mask_truncated():
    loop, svc, _ = make_loop(["grpo.mask_truncated=true"])  # max_tokens 1: every one-token answer counts as cut
    metrics, _ = loop.step(0)
    assert float(svc.trainer_group.steps[0].loss_mask.sum()) == 0.0 and metrics["episodes_with_signal"] == 0.0
    loop, svc, _ = make_loop(["grpo.mask_truncated=true", "rollout.max_tokens=2"])
    loop.step(0)
    batch = svc.trainer_group.steps[0]
    assert torch.equal(batch.loss_mask, (batch.old_logprobs != 0).float())  # nothing cut, nothing masked


def test_truncated_rows_follow_the_batch_rows():
    cut, whole = [1, 1, 1], [1]
    eps = [
        Episode(0, 0, prompts=[[5], [6]], responses=[whole, cut], logprobs=[[0.0], [0.0] * 3]),  # two rows, cut
        Episode(0, 0, prompts=[[5], [6]], responses=[whole, whole], logprobs=[[0.0], [0.0]], continued=True),  # one row
        Episode(0, 0, prompts=[[5]], responses=[cut], logprobs=[[0.0] * 3], continued=True),
    ]
    assert truncated_rows(eps, max_tokens=3).tolist() == [True, True, False, True]


def test_signal_groups_are_the_complete_groups_with_different_rewards():
    eps = [Episode(g, 0, reward=r) for g, rewards in ((0, (1, 1)), (1, (0, 1)), (2, (1,))) for r in rewards]
    assert [[ep.group_id for ep in g] for g in signal_groups(eps, 2)] == [[1, 1]]
