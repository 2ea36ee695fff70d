"""The asynchronous loop's staleness gate and batch stream (rlsvc/async_loop.py RolloutProducer,
BatchStream), the one place staleness is bounded, over the plain rules fleet and a seeded answer
function, no Ray: no episode of batch b starts before the engines hold version >= b - k; batches
come out in order with the episodes a separate `collect` of each would play; the next batch's
episodes start while the current one's last hands are still played; newer weights are loaded
only when no generate call is in flight; k = 0 is the synchronous schedule."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from conftest import RulesFleet
from test_rollout_runner import SeededRandom

from rlsvc.async_loop import RolloutProducer
from rlsvc.loop import ScoredBatch
from rlsvc.models.tokenizer import build_tokenizer
from rlsvc.policy_io import TaskCodec
from rlsvc.rollout.runner import RolloutRunner
from rlsvc.tasks.blackjack import BlackjackTask

GROUPS, GROUP_SIZE, SEED_STRIDE = 6, 4, 10_000


class Recording(SeededRandom):
    """Records, per generate call, which batches its episodes belong to (from their seeds) and
    whether another call was in flight; each call takes a moment, as an engine's would."""

    def __init__(self, codec: TaskCodec) -> None:
        super().__init__(codec)
        self.lock = threading.Lock()
        self.in_flight = 0
        self.calls: list[set[int]] = []

    def generate(self, prompts, seeds):
        with self.lock:
            self.in_flight += 1
            self.calls.append({s // (SEED_STRIDE * 1009) for s in seeds})
        try:
            time.sleep(0.002)
            return super().generate(prompts, seeds)
        finally:
            with self.lock:
                self.in_flight -= 1


class Sync:
    """The weight sync's rollout side: records the generate calls in flight at each load."""

    def __init__(self, gen: Recording) -> None:
        self.gen = gen
        self.in_flight_at_apply: list[int] = []

    def apply(self, staged) -> dict[str, float]:
        self.in_flight_at_apply.append(self.gen.in_flight)
        return {"sync/apply_s": 0.0}


def _loop(runner: RolloutRunner, staleness: int, sync: Sync) -> SimpleNamespace:
    cfg = SimpleNamespace(buffer=SimpleNamespace(max_staleness=staleness), grpo=SimpleNamespace(group_size=GROUP_SIZE))
    return SimpleNamespace(
        cfg=cfg,
        runner=runner,
        sync=sync,
        groups=lambda b: [(b * GROUPS + g, 500 + b * GROUPS + g) for g in range(GROUPS)],
        sample_seed=lambda b: b * SEED_STRIDE,
        score_batch=lambda played: ScoredBatch(played, played, {}, 0.0),  # the reward step, in the scorer thread
    )


def _staged(version: int) -> SimpleNamespace:
    return SimpleNamespace(manifest=SimpleNamespace(version=version))


def _episodes(eps) -> list[tuple]:
    return [(e.group_id, e.texts, e.env_return, e.outcome) for e in eps]


def test_batches_stream_in_order_overlap_and_load_weights_between_rounds():
    codec = TaskCodec(BlackjackTask(), build_tokenizer())
    gen = Recording(codec)
    sync = Sync(gen)
    runner = RolloutRunner(gen, RulesFleet(10), codec, max_turns=12, slot_groups=2)
    loop = _loop(runner, staleness=1, sync=sync)
    producer = RolloutProducer(loop, first_batch=0, engine_version=0)
    try:
        batches = []
        for b in range(4):  # the trainer: learn from batch b (at version b), publish version b + 1
            batch = producer.next_batch(timeout_s=60)
            assert batch.index == b and batch.version >= b - 1 and all(e.policy_version == batch.version for e in batch.episodes)
            assert batch.scored is not None and batch.scored.episodes == batch.episodes
            batches.append(batch)
            producer.publish(_staged(b + 1))
    finally:
        producer.stop()

    # each batch: the episodes a collect of it alone plays (seeds depend on episode and turn only)
    alone = RolloutRunner(SeededRandom(codec), RulesFleet(10), codec, max_turns=12)
    for b, batch in enumerate(batches):
        played = alone.collect(loop.groups(b), GROUP_SIZE, version=0, sample_seed=loop.sample_seed(b))
        assert _episodes(batch.episodes) == _episodes(played)
    assert any(len(call) == 2 for call in gen.calls)  # a call carried two batches' episodes
    assert sync.in_flight_at_apply and set(sync.in_flight_at_apply) == {0}
    assert producer.engine_version >= 3


@pytest.mark.parametrize("k", [0, 1, 2])
def test_every_episode_starts_within_the_bound(k):
    codec = TaskCodec(BlackjackTask(), build_tokenizer())
    gen = Recording(codec)
    sync = Sync(gen)
    runner = RolloutRunner(gen, RulesFleet(10), codec, max_turns=12, slot_groups=2)
    producer = RolloutProducer(_loop(runner, staleness=k, sync=sync), first_batch=0, engine_version=0)
    versions = []
    try:
        for b in range(6):
            batch = producer.next_batch(timeout_s=60)
            assert batch.index == b and min(e.policy_version for e in batch.episodes) >= b - k, (k, b, batch.version)
            versions.append(batch.version)
            producer.publish(_staged(b + 1))
    finally:
        producer.stop()
    assert versions == sorted(versions)  # weights only move forward


def test_no_batch_starts_before_its_version_is_live():
    """Staleness 0: batch b waits for version b, so no call mixes batches."""
    codec = TaskCodec(BlackjackTask(), build_tokenizer())
    gen = Recording(codec)
    runner = RolloutRunner(gen, RulesFleet(10), codec, max_turns=12)
    producer = RolloutProducer(_loop(runner, staleness=0, sync=Sync(gen)), first_batch=0, engine_version=0)
    try:
        for b in range(3):
            time.sleep(0.2)  # were the gate open, batch b + 1 would start now
            batch = producer.next_batch(timeout_s=60)
            assert batch.index == b and batch.version == b
            assert all(max(call) <= b for call in gen.calls)
            producer.publish(_staged(b + 1))
    finally:
        producer.stop()
    assert all(len(call) == 1 for call in gen.calls)
