"""Asynchronous GRPO: rollouts keep running while the trainer steps, staleness bounded.

A producer thread in the driver plays batch after batch with whatever weights the engines hold;
the trainer (the calling thread) learns from each batch in order and publishes the next version.
Batch b is the one trainer step b learns from, when the trainer is at version b; it may be played
by any version >= b - k (k = buffer.max_staleness), so the producer waits before batch b until the
engines hold at least b - k. k = 0 is the synchronous schedule (batch b waits for version b, which
the trainer publishes after learning from batch b - 1: no deadlock), k = 1 overlaps playing batch
b + 1 with learning from batch b.

Weights: after each step the trainer thread `stage`s the new version (its side of the transfer);
the producer `apply`s the newest staged version between two batches, so an engine never changes
weights inside a batch, is never drained and never rebuilt, and a batch carries one version.
Off-policy correction is the loss's: the clipped ratio against vLLM's behaviour logprobs, or, with
`grpo.tis_cap`, decoupled PPO with truncated importance weights.

A policy actor that dies (a rollout worker in the producer, a trainer rank or the reference in the
trainer thread) surfaces from `step` as the actor error; the job then recovers as it does for the
synchronous loop (rlsvc/recovery.py): the producer is stopped, the actors replaced, everything
restored from the newest checkpoint, and the next `step` starts a new producer from there.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from dataclasses import dataclass, field

from rlsvc.buffer.replay import Episode
from rlsvc.cluster.errors import ActorDied
from rlsvc.loop import GRPOLoop
from rlsvc.rollout.runner import RolloutWorkerLost
from rlsvc.weight_sync.base import Staged


@dataclass
class PlayedBatch:
    index: int
    version: int
    episodes: list[Episode]
    rollout_s: float
    apply: dict[str, float] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)  # the runner's generate_s / env_s


class RolloutProducer:
    """The producer thread: gate on staleness, apply the newest staged weights, play a batch."""

    def __init__(self, loop: GRPOLoop, first_batch: int, engine_version: int) -> None:
        self.loop = loop
        self.k = loop.cfg.buffer.max_staleness
        self.engine_version = engine_version
        self.batches: queue.Queue[PlayedBatch | BaseException] = queue.Queue()
        # held while weights are applied; the trainer stages under it, so a transport's staged
        # buffer is never rewritten while workers read it
        self.apply_lock = threading.Lock()
        self._cv = threading.Condition()
        self._staged: Staged | None = None
        self._stop = False
        self.idle_s = 0.0
        self._thread = threading.Thread(target=self._run, args=(first_batch,), name="rlsvc-rollouts", daemon=True)
        self._thread.start()

    def publish(self, staged: Staged) -> None:
        with self._cv:
            self._staged = staged
            self._cv.notify_all()

    def next_batch(self, timeout_s: float = 1800.0) -> PlayedBatch:
        item = self.batches.get(timeout=timeout_s)
        if isinstance(item, (RolloutWorkerLost, ActorDied)):
            raise item  # a policy actor died: the job restarts from its newest checkpoint (rlsvc/recovery.py)
        if isinstance(item, BaseException):
            raise RuntimeError("the rollout producer failed") from item
        return item

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(timeout=600)

    def _newest_staged(self, b: int) -> Staged | None:
        """Wait until batch b may be played; return staged weights newer than the engines'."""
        t0 = time.perf_counter()
        with self._cv:
            while not self._stop:
                newest = self._staged.manifest.version if self._staged is not None else -1
                if max(self.engine_version, newest) >= b - self.k:
                    break
                self._cv.wait(timeout=1.0)
            staged = self._staged if self._staged is not None and self._staged.manifest.version > self.engine_version else None
        self.idle_s += time.perf_counter() - t0
        return staged

    def _run(self, first_batch: int) -> None:
        try:
            for b in itertools.count(first_batch):
                staged = self._newest_staged(b)
                if self._stop:
                    return
                applied: dict[str, float] = {}
                if staged is not None:
                    with self.apply_lock:
                        applied = self.loop.sync.apply(staged)
                    self.engine_version = staged.manifest.version
                t0 = time.perf_counter()
                episodes = self.loop.collect(b, self.engine_version)
                self.batches.put(
                    PlayedBatch(b, self.engine_version, episodes, time.perf_counter() - t0, applied, dict(self.loop.runner.last_timing))
                )
        except BaseException as err:  # surfaced to the trainer thread by next_batch()
            self.batches.put(err)


class AsyncGRPOLoop(GRPOLoop):
    """`step(i)` learns from batch i as soon as the producer has played it."""

    producer: RolloutProducer | None = None
    _last_step_end: float = 0.0
    _idle_mark: float = 0.0

    def start(self) -> None:
        """Begin producing; call after the first weights are live in the engines."""
        self.producer = RolloutProducer(self, first_batch=self.version, engine_version=self.version)
        self._last_step_end = time.perf_counter()

    def step(self, step: int) -> tuple[dict[str, float], list[Episode]]:
        if self.producer is None:
            self.start()
        producer = self.producer
        t0 = time.perf_counter()
        batch = producer.next_batch()
        if batch.index != step:
            raise RuntimeError(f"trainer step {step} got batch {batch.index}")
        t_got = time.perf_counter()
        metrics = self.learn(batch.episodes)
        t_learn = time.perf_counter()
        with producer.apply_lock:
            staged = self.sync.stage(self.version)
        producer.publish(staged)
        t_end = time.perf_counter()
        wall = max(t_end - self._last_step_end, 1e-9)
        rollout_idle = producer.idle_s - self._idle_mark
        self._idle_mark, self._last_step_end = producer.idle_s, t_end
        tokens = sum(len(r) for ep in batch.episodes for r in ep.responses)
        metrics.update(
            {
                **staged.timings,
                **batch.apply,
                "time/rollout_s": batch.rollout_s,
                **{f"time/{k}": v for k, v in batch.timing.items()},  # generate_s, env_s: parts of rollout_s
                "time/trainer_wait_s": t_got - t0,
                "time/sync_s": t_end - t_learn,
                "time/step_s": wall,
                "trainer_idle_frac": (t_got - t0) / wall,
                "rollout_idle_frac": min(rollout_idle / wall, 1.0),
                "behaviour_version": float(batch.version),
                "tokens_per_s": tokens / max(batch.rollout_s, 1e-9),
            }
        )
        return metrics, batch.episodes

    def close(self) -> None:
        if self.producer is not None:
            self.producer.stop()
            self.producer = None
