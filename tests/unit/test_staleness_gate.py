"""The asynchronous loop's staleness gate (rlsvc/async_loop.py RolloutProducer), the one place
staleness is bounded: batch b is played only with a policy version >= b - k, weights change only
between batches, and k = 0 is the synchronous schedule. In-process fakes, no Ray."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from rlsvc.async_loop import RolloutProducer
from rlsvc.weight_sync.base import Staged
from rlsvc.weight_sync.manifest import Manifest


class FakeLoop:
    """What the producer uses of the loop: the staleness bound, the sync's `apply`, `collect`."""

    def __init__(self, k: int) -> None:
        self.cfg = SimpleNamespace(buffer=SimpleNamespace(max_staleness=k))
        self.applied: list[int] = []
        self.sync = SimpleNamespace(apply=self._apply)
        self.runner = SimpleNamespace(last_timing={})
        self.played: list[tuple[int, int]] = []
        self.lock = threading.Lock()

    def _apply(self, staged: Staged) -> dict[str, float]:
        self.applied.append(staged.manifest.version)
        return {}

    def collect(self, b: int, version: int) -> list:
        with self.lock:
            self.played.append((b, version))
        return []


def staged(version: int) -> Staged:
    return Staged(Manifest(version=version, specs=[], buckets=[]))


def run(k: int, steps: int) -> FakeLoop:
    """The trainer's side: learn from batch b (at version b), then publish version b + 1."""
    loop = FakeLoop(k)
    producer = RolloutProducer(loop, first_batch=0, engine_version=0)  # type: ignore[arg-type]
    try:
        for b in range(steps):
            batch = producer.next_batch(timeout_s=30)
            assert batch.index == b
            assert batch.version >= b - k, (b, batch.version)
            producer.publish(staged(b + 1))
    finally:
        producer.stop()
    return loop


@pytest.mark.parametrize("k", [0, 1, 2])
def test_every_batch_is_played_within_the_bound(k):
    loop = run(k, steps=8)
    assert all(version >= b - k for b, version in loop.played)
    assert loop.applied == sorted(loop.applied)  # newer weights only, between batches


def test_zero_staleness_is_the_synchronous_schedule():
    loop = run(0, steps=6)
    assert loop.played[:6] == [(b, b) for b in range(6)]
