"""Asynchronous GRPO: rollouts keep running while the trainer steps, staleness bounded.

A producer thread in the driver streams the episodes of batch after batch through the env slots
with whatever weights the engines hold; the trainer (the calling thread) learns from each batch in
order and publishes the next version. Batch b is the one trainer step b learns from, when the
trainer is at version b; its episodes may start once the engines hold version >= b - k
(k = buffer.max_staleness). k = 0 is the synchronous schedule (batch b waits for version b, which
the trainer publishes after learning from batch b - 1: no deadlock); k = 1 overlaps playing batch
b + 1 with learning from batch b.

Dynamic sampling (`grpo.dynamic_sampling`) filters at the consumer: the scorer thread scores
every batch as before, and the trainer's step drops the groups whose rewards are all equal and
takes the next played batch as a refill until it has `groups_per_step` kept groups or
`max_sampling_rounds` batches; the producer never stops to wait for the filter. A step then
consumes several batches, so batch indices run ahead of versions by the refills taken
(`GRPOLoop.sampling_offset`), and the gate reads: batch b may start once the engines hold
version >= b - offset - k. The offset only grows and every step takes at least one batch, so
batch b is learnt from at version <= b - offset(when it started): staleness stays <= k, refills
included. With k >= 1 a refill is a batch the producer already plays ahead (at most k versions
old, like any batch); with k = 0 the offset moves on when the step asks for a refill, and the
refill is played then, with the current weights (the synchronous loop's schedule).

Batches are not played in waves: a slot whose episode ends takes the next episode, of the next
batch once the current one has none left to start (and the gate above lets it), so a batch's
longest hands no longer hold up the start of the next one (PipelineRL's in-flight updates).

Weights: after each step the trainer thread `stage`s the new version (its side of the transfer);
the producer `apply`s the newest staged version at the next round boundary (no generate call in
flight), so an engine is never drained and never rebuilt. An episode running across the boundary
plays its later turns with the newer weights: its tokens each carry the behaviour logprob of the
version that sampled them, which is what the loss's off-policy correction uses (the clipped ratio,
or decoupled PPO with truncated importance weights under `grpo.tis_cap`), and its recorded
`policy_version` is the one it started with, so staleness is never under-counted.

A policy actor that dies (a rollout worker in the producer, a trainer rank or the reference in the
trainer thread) surfaces from `step` as the actor error; the job then recovers as it does for the
synchronous loop (rlsvc/job/recovery.py): the producer is stopped, the actors replaced, everything
restored from the newest checkpoint, and the next `step` starts a new producer from there.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rlsvc.algo.sampling import signal_groups
from rlsvc.episode import Episode
from rlsvc.interfaces import ActorDied
from rlsvc.loop import GRPOLoop, ScoredBatch
from rlsvc.models.tokenizer import PAD_ID
from rlsvc.rollout.runner import Job, RolloutWorkerLost
from rlsvc.trainer.batch import build_batch
from rlsvc.weight_sync.base import Staged


@dataclass
class PlayedBatch:
    index: int
    version: int
    episodes: list[Episode]
    rollout_s: float
    apply: dict[str, float] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)  # the runner's generate_s / env_s
    scored: ScoredBatch | None = None
    """Rewards and advantages, filled by the producer's scorer thread."""


class RolloutProducer:
    """The producer thread: streams batches through the runner (a `BatchStream`), applying newer
    staged weights between rounds. Its scorer thread scores each batch as it completes
    (`AsyncGRPOLoop.score_batch`: rewards, advantages, the reference's rows into its cache), so
    the trainer's step starts at the buffer."""

    def __init__(self, loop: GRPOLoop, first_batch: int, engine_version: int) -> None:
        self.loop = loop
        self.k = loop.cfg.buffer.max_staleness
        self.engine_version = engine_version
        self.offset = first_batch - engine_version
        """How far batch indices run ahead of versions: the refills taken (`GRPOLoop.sampling_offset`)."""
        self.batches: queue.Queue[PlayedBatch | BaseException] = queue.Queue()  # scored, for the trainer
        self.played: queue.Queue[PlayedBatch | None] = queue.Queue()  # for the scorer; None: stop
        # held while weights are applied; the trainer stages under it, so a transport's staged
        # buffer is never rewritten while workers read it
        self.apply_lock = threading.Lock()
        self._cv = threading.Condition()
        self._staged: Staged | None = None
        self._stop = False
        self.idle_s = 0.0
        self._thread = threading.Thread(target=self._run, args=(first_batch,), name="rlsvc-rollouts", daemon=True)
        self._scorer = threading.Thread(target=self._score, name="rlsvc-scorer", daemon=True)
        self._thread.start()
        self._scorer.start()

    def publish(self, staged: Staged) -> None:
        with self._cv:
            self._staged = staged
            self._cv.notify_all()

    def next_batch(self, timeout_s: float = 1800.0) -> PlayedBatch:
        item = self.batches.get(timeout=timeout_s)
        if isinstance(item, (RolloutWorkerLost, ActorDied)):
            raise item  # a policy actor died: the job restarts from its newest checkpoint (rlsvc/job/recovery.py)
        if isinstance(item, BaseException):
            raise RuntimeError("the rollout producer failed") from item
        return item

    def request_stop(self) -> None:
        """Ask the producer thread to end (without waiting for it)."""
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self.played.put(None)  # wakes the scorer

    def stop(self) -> None:
        self.request_stop()
        self._thread.join(timeout=600)
        self._scorer.join(timeout=600)

    @property
    def stopped(self) -> bool:
        return self._stop

    def may_start(self, b: int) -> bool:
        """The staleness gate (module docstring): the offset is the refills the trainer took."""
        return self.engine_version >= b - self.offset - self.k

    def next_refill(self) -> PlayedBatch:
        """Dynamic sampling's next round: count it (the gate lets the producer start one batch
        further), then wait for the next played batch."""
        with self._cv:
            self.offset += 1
            self._cv.notify_all()
        return self.next_batch()

    def newer_staged(self) -> Staged | None:
        staged = self._staged
        return staged if staged is not None and staged.manifest.version > self.engine_version else None

    def apply_newest(self) -> dict[str, float]:
        """Load the newest staged version into the engines (no generate call is in flight)."""
        staged = self.newer_staged()
        if staged is None:
            return {}
        with self.apply_lock:
            applied = self.loop.sync.apply(staged)
        with self._cv:
            self.engine_version = staged.manifest.version
        return applied

    def wait_for(self, ready: Callable[[], bool]) -> bool:
        """Block until `ready()` or newer staged weights (True), or until stopped (False)."""
        t0 = time.perf_counter()
        with self._cv:
            while not self._stop and not ready() and self.newer_staged() is None:
                self._cv.wait(timeout=1.0)
        self.idle_s += time.perf_counter() - t0
        return not self._stop

    def _run(self, first_batch: int) -> None:
        try:
            self.loop.runner.stream(BatchStream(self, first_batch))
        except BaseException as err:  # surfaced to the trainer thread by next_batch()
            self.batches.put(err)

    def _score(self) -> None:
        """Batches in the order they complete: scored, then handed to the trainer."""
        while (batch := self.played.get()) is not None and not self._stop:
            try:
                batch.scored = self.loop.score_batch(batch.episodes)
            except BaseException as err:  # surfaced to the trainer thread by next_batch()
                self.batches.put(err)
                return
            self.batches.put(batch)


@dataclass
class _Open:
    """A batch whose episodes have started to be played."""

    jobs: list[Job]
    version: int
    started: float
    left: int = 0
    taken: int = 0


class BatchStream:
    """The runner's job source in asynchronous mode: batch after batch from `first`, each
    episode started only when the staleness gate lets its batch start; a batch is handed to the
    trainer (in order) once its last episode has ended."""

    def __init__(self, producer: RolloutProducer, first: int) -> None:
        self.producer = producer
        self.loop = producer.loop
        self._lock = threading.Lock()
        self._open: dict[int, _Open] = {}
        self._next_open = first  # the next batch to start
        self._next_done = first  # the next batch to hand over
        self._applied: dict[str, float] = {}
        self._timing_mark: dict[str, float] = {}

    @property
    def stopped(self) -> bool:
        return self.producer.stopped

    def stop(self) -> None:  # a slot group failed: the others stop too
        self.producer.request_stop()

    def take(self, n: int) -> list[Job]:
        out: list[Job] = []
        with self._lock:
            while len(out) < n and not self.stopped:
                current = self._open.get(self._next_open - 1)
                if current is None or current.taken == len(current.jobs):
                    if not self.producer.may_start(self._next_open):
                        break
                    current = self._start_batch(self._next_open)
                    self._next_open += 1
                more = current.jobs[current.taken : current.taken + n - len(out)]
                current.taken += len(more)
                out += more
        return out

    def _start_batch(self, b: int) -> _Open:
        loop, version = self.loop, self.producer.engine_version
        jobs = loop.runner.jobs(loop.groups(b), loop.cfg.grpo.group_size, version, loop.sample_seed(b), batch=b)
        self._open[b] = opened = _Open(jobs, version, time.perf_counter(), left=len(jobs))
        return opened

    def finished(self, job: Job) -> None:
        with self._lock:
            self._open[job.batch].left -= 1
            while (done := self._open.get(self._next_done)) is not None and done.left == 0:
                del self._open[self._next_done]
                timing = self.loop.runner.timing()
                played = PlayedBatch(
                    self._next_done,
                    done.version,
                    [j.episode for j in done.jobs],
                    time.perf_counter() - done.started,
                    self._applied,
                    {k: v - self._timing_mark.get(k, 0.0) for k, v in timing.items()},  # since the last batch handed over
                )
                self._applied, self._timing_mark = {}, timing
                self.producer.played.put(played)
                self._next_done += 1

    def wait(self) -> bool:
        return self.producer.wait_for(lambda: self.producer.may_start(self._next_open))

    def update_pending(self) -> bool:
        return self.producer.newer_staged() is not None

    def between_rounds(self) -> None:
        applied = self.producer.apply_newest()
        with self._lock:
            for k, v in applied.items():
                self._applied[k] = self._applied.get(k, 0.0) + v


def played_together(batches: list[PlayedBatch]) -> PlayedBatch:
    """The batches one step took (dynamic sampling's refills) as one, for the step's metrics:
    times added up, the first batch's index and version."""
    if len(batches) == 1:
        return batches[0]
    first = batches[0]
    apply: dict[str, float] = {}
    timing: dict[str, float] = {}
    for b in batches:
        for mine, theirs in ((apply, b.apply), (timing, b.timing)):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0.0) + v
    episodes = [ep for b in batches for ep in b.episodes]
    return PlayedBatch(first.index, first.version, episodes, sum(b.rollout_s for b in batches), apply, timing, first.scored)


class AsyncGRPOLoop(GRPOLoop):
    """`step(i)` learns from batch i as soon as the producer has played it."""

    producer: RolloutProducer | None = None
    _last_step_end: float = 0.0
    _idle_mark: float = 0.0

    def score_batch(self, played: list[Episode]) -> ScoredBatch:
        """Rewards and advantages, then the reference's logprobs of the batch's rows into the
        reference cache: this runs on the scorer thread, beside the trainer, and the trainer's
        step then finds every row there (the reference is frozen: which thread asks does not
        change the answer)."""
        scored = super().score_batch(played)
        reference = self.svc.reference_model
        grpo = self.cfg.grpo
        # with dynamic sampling the groups the step will drop need no reference logprobs
        wanted = [ep for g in signal_groups(scored.episodes, grpo.group_size) for ep in g] if grpo.dynamic_sampling else scored.episodes
        if reference is not None and wanted:
            t0 = time.perf_counter()
            rows = build_batch(wanted, PAD_ID, grpo.normalization)
            self.reference_cache.logprobs(reference.logprobs, rows.input_ids, self.allowed, rows.lengths)
            scored.score_s += time.perf_counter() - t0
        return scored

    def start(self) -> None:
        """Begin producing; call after the first weights are live in the engines."""
        self.producer = RolloutProducer(self, first_batch=self.batch_index, engine_version=self.version)
        self._last_step_end = time.perf_counter()

    def step(self, step: int | None = None) -> tuple[dict[str, float], list[Episode]]:
        step = self.check_step(step)
        if self.producer is None:
            self.start()
        producer = self.producer
        assert producer is not None  # started just above
        t0 = time.perf_counter()
        batches = [self._take(producer.next_batch)]
        assert batches[0].scored is not None  # (`_take` checks every batch)
        scored = batches[0].scored
        if self.cfg.grpo.dynamic_sampling:
            scored = self.gather_kept(scored, lambda: self._refill(producer, batches))
        batch = played_together(batches)
        t_got = time.perf_counter()
        metrics = self.learn_scored(scored)
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

    def _take(self, next_batch: Callable[[], PlayedBatch]) -> PlayedBatch:
        """The producer's next batch, which must be the one at `batch_index` (scored)."""
        batch = next_batch()
        if batch.index != self.batch_index or batch.scored is None:
            raise RuntimeError(f"trainer step {self.version} got batch {batch.index}, expected {self.batch_index}")
        return batch

    def _refill(self, producer: RolloutProducer, taken: list[PlayedBatch]) -> ScoredBatch:
        """Dynamic sampling's next round: the next played batch, counted in `sampling_offset`
        (the loop's, which checkpoints save, and the producer's gate alike)."""
        self.sampling_offset += 1
        taken.append(batch := self._take(producer.next_refill))
        assert batch.scored is not None  # `_take` checked it
        return batch.scored

    def close(self) -> None:
        if self.producer is not None:
            self.producer.stop()
            self.producer = None
