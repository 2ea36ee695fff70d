"""One GRPO step without Ray: in-process fakes stand in for the typed handles that `Services`
gives the loop (rlsvc/cluster/groups.py), the plain BlackJack rules for the env fleet and a
seeded random answerer for the rollout workers (the pattern of test_rollout_runner.py)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch
from conftest import RulesFleet

from rlsvc.algo.grpo import group_advantages
from rlsvc.buffer.replay import ReplayBuffer
from rlsvc.config import load_config
from rlsvc.envs.blackjack import HandView
from rlsvc.episode import Episode
from rlsvc.loop import GRPOLoop, deal_seed
from rlsvc.models.tokenizer import build_tokenizer
from rlsvc.policy_io import TaskCodec
from rlsvc.tasks.blackjack import BlackjackTask
from rlsvc.trainer.batch import TrainBatch

B, G = 4, 4


class SeededRandom:
    """Answers HIT/STAND at random from the request's seed, so a group's episodes differ."""

    def __init__(self, codec: TaskCodec) -> None:
        self.tok = codec.tokenizer

    def generate(self, prompts, seeds):
        texts = ["HIT" if random.Random(s).random() < 0.6 else "STAND" for s in seeds]
        return [{"token_ids": [self.tok.convert_tokens_to_ids(t)], "logprobs": [-0.7], "text": t} for t in texts]


class FakeTrainerGroup:
    def __init__(self) -> None:
        self.steps: list[TrainBatch] = []
        self.logprob_calls: list[torch.Tensor] = []
        self.sft_batches: list[tuple[torch.Tensor, torch.Tensor]] = []

    def train_step(self, batch: TrainBatch):  # the loss settings are the trainer's own (its spec)
        self.steps.append(batch)
        return {"loss": 0.25, "grad_norm": 1.0, "nonfinite_skipped": 0.0}

    def sft_step(self, input_ids, loss_mask):
        self.sft_batches.append((input_ids, loss_mask))
        return 1.5

    def logprobs(self, input_ids, allowed_token_ids=None, lengths=None):
        self.logprob_calls.append(input_ids)
        return torch.full(input_ids.shape, -0.5)

    def hf_state_dict(self):
        return {}


class FakeReference:
    def __init__(self) -> None:
        self.calls = 0

    def logprobs(self, input_ids, allowed_token_ids=None, lengths=None):
        self.calls += 1
        return torch.full(input_ids.shape, -0.4)


class FakeReward:
    """The environment's return as the reward; None (the reward function failed) for the first
    episode of each group in `fail_groups`."""

    def __init__(self, fail_groups=()) -> None:
        self.fail_groups = set(fail_groups)
        self.scored: list[list[Episode]] = []

    def score(self, episodes):
        self.scored.append(list(episodes))
        seen: set[int] = set()
        out = []
        for ep in episodes:
            if ep.group_id in self.fail_groups and ep.group_id not in seen:
                out.append(None)
            else:
                out.append(ep.env_return)
            seen.add(ep.group_id)
        return out


class FakeSync:
    """Records the versions pushed (synchronous loop) or staged and applied (asynchronous)."""

    def __init__(self) -> None:
        self.pushed: list[int] = []
        self.staged: list[int] = []
        self.applied: list[int] = []

    def push(self, version):
        self.pushed.append(version)
        return {"sync/total_s": 0.0}

    def stage(self, version):
        self.staged.append(version)
        return SimpleNamespace(manifest=SimpleNamespace(version=version), timings={"sync/gather_s": 0.0})

    def apply(self, staged):
        self.applied.append(staged.manifest.version)
        return {"sync/load_s": 0.0}

    def close(self, timeout_s=None):
        pass


def make_loop(overrides=(), lose=None, fail_groups=(), reference=False, loop_cls=GRPOLoop):
    cfg = load_config(None, [f"grpo.groups_per_step={B}", f"grpo.group_size={G}", "trainer.minibatches=1", *overrides])
    codec = TaskCodec(BlackjackTask(), build_tokenizer())
    svc = SimpleNamespace(
        generator=SeededRandom(codec),
        fleet=RulesFleet(num_slots=8, lose=lose),
        trainer_group=FakeTrainerGroup(),
        reference_model=FakeReference() if reference else None,
        buffer_client=ReplayBuffer(1000),  # the BufferWorker's own object: add_and_sample
        reward_client=FakeReward(fail_groups),
    )
    sync = FakeSync()
    return loop_cls(cfg, svc, codec, make_sync=lambda: sync), svc, sync


def test_a_step_plays_scores_and_trains_on_every_group():
    loop, svc, sync = make_loop()
    metrics, episodes = loop.step(0)

    assert len(episodes) == B * G and [ep.group_id for ep in episodes] == [g for g in range(B) for _ in range(G)]
    assert all(ep.outcome in {"win", "push", "loss"} and ep.policy_version == 0 for ep in episodes)
    # scored once, the reward (here the env's return) on every episode
    assert len(svc.reward_client.scored) == 1 and len(svc.reward_client.scored[0]) == B * G
    assert all(ep.reward == ep.env_return for ep in episodes)
    # group advantages: each group's rewards against its own mean
    for g in range(B):
        group = [ep for ep in episodes if ep.group_id == g]
        expected = group_advantages(torch.tensor([[ep.reward for ep in group]]), normalize_std=loop.cfg.grpo.normalize_std)[0]
        assert torch.allclose(torch.tensor([ep.advantage for ep in group]), expected)
    # one trainer step on one row per decision, each row carrying its episode's advantage
    assert len(svc.trainer_group.steps) == 1
    batch = svc.trainer_group.steps[0]
    decisions = [ep for ep in episodes for _ in ep.responses]
    assert batch.input_ids.shape[0] == len(decisions) == batch.advantages.shape[0]
    assert batch.loss_mask.shape == batch.input_ids.shape == batch.old_logprobs.shape
    assert torch.allclose(batch.advantages, torch.tensor([ep.advantage for ep in decisions]))
    assert batch.ref_logprobs is None and batch.prox_logprobs is None
    # the version moves on and the new weights are pushed
    assert loop.version == 1 and sync.pushed == [1]
    assert loop.trained_groups == list(range(B))
    assert metrics["train_skipped"] == 0.0 and metrics["groups_dropped"] == 0.0 and metrics["policy_version"] == 1.0
    assert metrics["loss"] == 0.25 and metrics["staleness_max"] == 0.0 and metrics["buffer_depth"] == 0.0
    assert metrics["return_mean"] == pytest.approx(sum(ep.env_return for ep in episodes) / len(episodes))


def test_a_group_with_a_lost_episode_is_dropped_and_counted():
    seed = 0  # run.seed of the default config
    lost_deal = deal_seed(seed, 0, 1)  # group 1 of step 0
    loop, svc, _ = make_loop(lose={lost_deal: 1})
    metrics, episodes = loop.step(0)

    failed = [ep for ep in episodes if ep.failed]
    assert len(failed) == 1 and failed[0].group_id == 1 and failed[0].outcome == "env_lost"
    assert metrics["failed_episodes"] == 1.0 and metrics["groups_dropped"] == 1.0 and metrics["train_skipped"] == 0.0
    assert {ep.group_id for ep in svc.reward_client.scored[0]} == {0, 2, 3}  # group 1 is not even scored
    assert loop.trained_groups == [0, 2, 3]
    batch = svc.trainer_group.steps[0]
    assert batch.input_ids.shape[0] == sum(len(ep.responses) for ep in episodes if ep.group_id != 1)
    assert loop.version == 1


def test_a_failed_reward_drops_its_group():
    loop, svc, _ = make_loop(fail_groups={2})
    metrics, episodes = loop.step(0)
    assert metrics["reward_errors"] == 1.0 and metrics["groups_dropped"] == 1.0
    assert loop.trained_groups == [0, 1, 3]
    assert sum(ep.failed for ep in episodes) == 1


def test_a_step_where_every_group_failed_is_skipped():
    loop, svc, sync = make_loop(fail_groups=range(B))
    metrics, _ = loop.step(0)
    assert metrics["train_skipped"] == 1.0 and metrics["groups_dropped"] == float(B) and metrics["reward_errors"] == float(B)
    assert svc.trainer_group.steps == [] and loop.trained_groups == []
    assert loop.version == 1 and metrics["policy_version"] == 1.0 and sync.pushed == [1]  # the version still moves on


def test_reference_and_proximal_logprobs_come_from_their_handles():
    loop, svc, _ = make_loop(overrides=["grpo.tis_cap=2.0"], reference=True)
    loop.step(0)
    batch = svc.trainer_group.steps[0]
    assert svc.reference_model.calls == 1 and torch.all(batch.ref_logprobs == -0.4)
    assert len(svc.trainer_group.logprob_calls) == 1 and torch.all(batch.prox_logprobs == -0.5)
    assert batch.ref_logprobs.shape == batch.prox_logprobs.shape == batch.input_ids.shape


def test_second_step_learns_from_the_next_groups_at_the_next_version():
    loop, svc, sync = make_loop()
    loop.step(0)
    metrics, episodes = loop.step(1)
    assert {ep.group_id for ep in episodes} == set(range(B, 2 * B)) and all(ep.policy_version == 1 for ep in episodes)
    assert loop.version == 2 and sync.pushed == [1, 2] and metrics["policy_version"] == 2.0


def test_warm_start_and_greedy_choice_go_through_the_trainer_group():
    loop, svc, _ = make_loop()
    assert loop.warm_start(2, batch_size=8) == 1.5
    assert len(svc.trainer_group.sft_batches) == 2
    ids, mask = svc.trainer_group.sft_batches[0]
    assert ids.shape == mask.shape and ids.shape[0] == 8 and mask.sum() > 0
    picks = loop.choose([HandView(12, 5, False)], ["HIT", "STAND"])
    assert picks == [1]  # equal logprobs: ties go to the last candidate
    assert len(svc.trainer_group.logprob_calls) == 1


def test_the_asynchronous_loop_runs_on_the_same_fakes():
    from rlsvc.async_loop import AsyncGRPOLoop

    loop, svc, sync = make_loop(overrides=["buffer.max_staleness=1"], loop_cls=AsyncGRPOLoop)
    try:
        metrics = [loop.step(i)[0] for i in range(3)]
    finally:
        loop.close()
    assert [m["policy_version"] for m in metrics] == [1.0, 2.0, 3.0] and sync.staged == [1, 2, 3]
    assert all(m["staleness_max"] <= 1 for m in metrics) and len(svc.trainer_group.steps) == 3
    assert sync.applied == sorted(sync.applied) and set(sync.applied) <= {1, 2, 3}


def test_the_asynchronous_scorer_fills_the_reference_cache_so_the_trainer_step_asks_nothing():
    """AsyncGRPOLoop.score_batch (the producer's scorer thread) asks the frozen reference for the
    batch's rows; the trainer's step then finds them all in the cache, with the same values."""
    from rlsvc.async_loop import AsyncGRPOLoop

    loop, svc, _ = make_loop(overrides=["buffer.max_staleness=1"], reference=True, loop_cls=AsyncGRPOLoop)
    scored = loop.score_batch(loop.collect(0, 0))
    assert svc.reference_model.calls == 1 and loop.reference_cache.misses > 0
    loop.learn_scored(scored)
    batch = svc.trainer_group.steps[0]
    assert svc.reference_model.calls == 1 and torch.all(batch.ref_logprobs[batch.loss_mask > 0] == -0.4)
