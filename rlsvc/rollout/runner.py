"""The multi-turn rollout loop: generate the next decision for every live episode in one batched
call, apply the parsed actions in the environments, repeat until every episode has ended.

It depends only on two small interfaces, so it runs the same over Ray actor handles (see
`rlsvc.cluster.fleet`) and over plain in-process objects in tests.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlsvc.episode import Episode, FailedObservation

__all__ = ["FailedObservation"]  # where the env fleets (rlsvc/envs/) import it from


class RolloutWorkerLost(RuntimeError):
    """Rollout workers died during a generate call (a crash, a lost node); `indices` says which."""

    def __init__(self, indices: list[int]) -> None:
        super().__init__(f"rollout workers {indices} died")
        self.indices = indices


class Generator(Protocol):
    def generate(self, prompts: list[list[int]], seeds: list[int]) -> list[dict]:
        """One result per prompt: {"token_ids": [...], "logprobs": [...], "text": str}; raises
        `RolloutWorkerLost` when workers died during the call (the loop replaces them). A runner
        with `adapter_versions` passes a third argument, each prompt's policy version."""
        ...


class EnvFleet(Protocol):
    num_slots: int

    def reset(self, slots: list[int], seeds: list[int]) -> list[Any]: ...

    def step(self, slots: list[int], actions: list[str]) -> list[Any]: ...


class PromptCodec(Protocol):
    """The task as the runner needs it (rlsvc.policy_io.TaskCodec): observation -> prompt token
    ids, sampled text -> action (None: an invalid answer), observation -> transcript record."""

    def encode(self, obs: Any) -> list[int]: ...

    def parse(self, text: str) -> Any | None: ...

    def observe(self, obs: Any) -> dict[str, Any]: ...

    def next_turn(self, sequence: list[int], obs: Any) -> list[int] | None: ...


@dataclass
class Job:
    """One episode to play: its record (filled as it is played), its deal and the base of its
    sampling seeds (turn t samples with `seed_base + t * 100_003`)."""

    episode: Episode
    deal_seed: int
    seed_base: int
    batch: int = 0


class JobSource(Protocol):
    """Where the slots take their next episodes from (`RolloutRunner.stream`)."""

    @property
    def stopped(self) -> bool:
        """Done for good: the slot groups return at their next round."""
        ...

    def take(self, n: int) -> list[Job]:
        """Up to `n` episodes that may start now; never blocks."""
        ...

    def finished(self, job: Job) -> None:
        """`job`'s episode has ended (played out, invalid, truncated or failed)."""
        ...

    def wait(self) -> bool:
        """Nothing is running on the caller's slots and nothing may start: block until something
        may (True) or until the source is done (False)."""
        ...

    def update_pending(self) -> bool:
        """Whether `between_rounds` has work (newer weights to load)."""
        ...

    def between_rounds(self) -> None:
        """Run while no generate call is in flight (e.g. load newer weights into the engines)."""
        ...

    def stop(self) -> None:
        """End it for every slot group (one of them failed)."""
        ...


class _Queue:
    """A fixed list of jobs several slot groups take from, each once; `stop` ends it for all."""

    def __init__(self, jobs: list[Job]) -> None:
        self._jobs = iter(jobs)
        self._lock = threading.Lock()
        self.stopped = False

    def take(self, n: int) -> list[Job]:
        with self._lock:
            return list(itertools.islice(self._jobs, n))

    def finished(self, job: Job) -> None:
        pass

    def wait(self) -> bool:
        return False  # a fixed list: nothing more will come

    def update_pending(self) -> bool:
        return False

    def between_rounds(self) -> None:
        pass

    def stop(self) -> None:
        self.stopped = True


class _GenerateGate:
    """Generate calls share it; `between_rounds` work holds it alone (a waiting writer goes first,
    so a new version is loaded at the next round boundary of every slot group)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._readers = 0
        self._writer_waiting = 0
        self._writing = False

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cv:
            while self._writing or self._writer_waiting:
                self._cv.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cv:
                self._readers -= 1
                self._cv.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cv:
            self._writer_waiting += 1
            while self._writing or self._readers:
                self._cv.wait()
            self._writer_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cv:
                self._writing = False
                self._cv.notify_all()


def _outcome(obs: Any) -> str | None:
    outcome = getattr(obs, "outcome", None)
    if outcome is None:
        outcome = (getattr(obs, "metadata", None) or {}).get("outcome")
    return outcome


@dataclass
class RolloutRunner:
    generator: Generator
    fleet: EnvFleet
    codec: PromptCodec
    max_turns: int = 12
    context: str = "turn"
    """`turn`: each decision's prompt is the latest observation; `episode`: an episode is one
    token sequence, each turn's prompt all earlier tokens plus the environment's reply
    (`codec.next_turn`), which vLLM receives as token ids (see `Episode.continued`)."""
    slot_groups: int = 1
    """The fleet's slots split into this many groups, each played by its own thread: while one
    group's actions are in the environments (a remote sandbox's round trip), another group's
    prompts are generated. The fleet must take concurrent calls on disjoint slots."""
    # seconds the last `collect` spent waiting on the generator and on the environments, summed
    # over the slot groups (with several groups they overlap, so they may add up to more than
    # the wall time); the rest is this loop's own work (prompt encoding, parsing, bookkeeping)
    last_timing: dict[str, float] = field(default_factory=dict)
    adapter_versions: bool = False
    """With LoRA: each generate call says which policy version samples each prompt (its
    episode's `policy_version`, whose adapter the engines keep until it ends)."""

    def collect(self, group_seeds: Sequence[tuple[int, int]], group_size: int, version: int, sample_seed: int) -> list[Episode]:
        """Play `group_size` episodes from each (group_id, deal_seed); all of a group share the deal.

        Episodes stream through the fleet's slots: a slot whose episode ends starts the next one
        before the next generate call, so every call carries as many live episodes as there are
        slots, instead of waves that each wait for their longest hand (each env round trip, which
        may be a remote sandbox's, is paid once per call, not once per wave's turn).

        Results are in episode order; sampling seeds depend on (episode, turn) only, so the
        schedule (how many slots, which slot) does not change them.
        """
        jobs = self.jobs(group_seeds, group_size, version, sample_seed)
        self.stream(_Queue(jobs), max_slots=len(jobs))
        return [job.episode for job in jobs]

    @staticmethod
    def jobs(group_seeds: Sequence[tuple[int, int]], group_size: int, version: int, sample_seed: int, batch: int = 0) -> list[Job]:
        """The episodes of one batch, in order: `group_size` per (group_id, deal_seed)."""
        deals = [(gid, seed) for gid, seed in group_seeds for _ in range(group_size)]
        return [
            Job(Episode(group_id=gid, policy_version=version), seed, sample_seed * 1009 + j, batch) for j, (gid, seed) in enumerate(deals)
        ]

    def stream(self, source: JobSource, max_slots: int | None = None) -> None:
        """Play episodes from `source` on all the fleet's slots (split into `slot_groups`, each
        its own thread) until it is done or stopped; `last_timing` then holds this call's
        generate/env seconds (`timing()` reads them while it runs)."""
        self._timing = {"generate_s": 0.0, "env_s": 0.0}
        self._lock = threading.Lock()
        self._gate = _GenerateGate()
        self._loader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rlsvc-load-weights")
        slots = list(range(min(self.fleet.num_slots, max_slots or self.fleet.num_slots)))
        k = max(1, min(self.slot_groups, len(slots)))
        groups = [slots[len(slots) * g // k : len(slots) * (g + 1) // k] for g in range(k)]
        try:
            if k == 1:
                self._play(groups[0], source)
            else:  # each group streams episodes from the shared source; seeds do not depend on which group
                errors: list[BaseException] = []

                def play(group: list[int]) -> None:
                    try:
                        self._play(group, source)
                    except BaseException as err:  # re-raised in the caller's thread below
                        errors.append(err)
                        source.stop()

                threads = [threading.Thread(target=play, args=(g,), name=f"rlsvc-slots-{i}", daemon=True) for i, g in enumerate(groups)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                if errors:
                    raise errors[0]
        finally:
            self._loader.shutdown(wait=True)
        self.last_timing = self.timing()

    def timing(self) -> dict[str, float]:
        """Generate/env seconds of the running (or last) `stream`, so far."""
        with self._lock:
            return dict(self._timing)

    def _play(self, slots: list[int], source: JobSource) -> None:
        """Play episodes from `source` on `slots` until it has none left (or is stopped)."""
        running: dict[int, Job] = {}  # slot -> its episode
        obs: dict[int, Any] = {}  # slot -> the observation its episode acts on next
        observe = self.codec.observe
        while not source.stopped:
            if source.update_pending():  # e.g. newer weights: loaded between two generate calls
                with self._gate.exclusive():
                    source.between_rounds()
            self._start([s for s in slots if s not in running], source, running, obs)
            if not running:
                if source.wait():
                    continue
                return
            live, prompts, new_tokens = self._prompts(running, obs)
            done = [s for s in running if s not in live]  # out of room: cut by `_prompts`
            if live:
                seeds = [running[s].seed_base + len(running[s].episode.prompts) * 100_003 for s in live]
                versions = [[running[s].episode.policy_version for s in live]] if self.adapter_versions else []
                with self._gate.shared():
                    outs = self._timed("generate_s", self.generator.generate, prompts, seeds, *versions)
                to_step, actions = [], []
                for s, prompt, out in zip(live, new_tokens, outs):
                    ep = running[s].episode
                    ep.prompts.append(prompt)
                    ep.responses.append(list(out["token_ids"]))
                    ep.logprobs.append(list(out["logprobs"]))
                    ep.texts.append(out["text"])
                    ep.observations.append(observe(obs[s]))
                    action = self.codec.parse(out["text"])
                    if action is None:
                        ep.invalid, ep.outcome = True, "invalid"
                        done.append(s)
                    else:
                        to_step.append(s)
                        actions.append(action)
                # newer weights that came during the generate call load while the env steps: the
                # load needs no env, and the next round then starts with them
                loading = self._load_beside(source)
                try:
                    new_obs = self._timed("env_s", self.fleet.step, to_step, actions) if to_step else []
                finally:
                    if loading is not None:
                        loading.result()
                for s, o in zip(to_step, new_obs):
                    ep = running[s].episode
                    if o.done:
                        self._finish(ep, o)
                    elif len(ep.prompts) >= self.max_turns:
                        ep.outcome = "truncated"
                    else:
                        obs[s] = o
                        continue
                    done.append(s)
            for s in done:
                source.finished(running.pop(s))

    def _prompts(self, running: dict[int, Job], obs: dict[int, Any]) -> tuple[list[int], list[list[int]], list[list[int]]]:
        """(slots to generate for, their full prompts, the tokens each adds to its episode). With
        `context=episode` a later turn's prompt is the episode's sequence so far plus the reply;
        an episode with no room left to answer ends here, `truncated`."""
        live, prompts, new = [], [], []
        for s in sorted(running):
            ep = running[s].episode
            if self.context == "episode" and ep.prompts:
                ep.continued = True
                sequence = ep.sequence()
                added = self.codec.next_turn(sequence, obs[s])
                if added is None:
                    ep.outcome = "truncated"
                    continue
                live.append(s)
                prompts.append(sequence + added)
                new.append(added)
            else:
                prompt = self.codec.encode(obs[s])
                live.append(s)
                prompts.append(prompt)
                new.append(prompt)
        return live, prompts, new

    def _load_beside(self, source: JobSource) -> concurrent.futures.Future | None:
        """`source.between_rounds()` in a thread (holding the gate alone), if it has work."""
        if not source.update_pending():
            return None

        def load() -> None:
            with self._gate.exclusive():
                source.between_rounds()

        return self._loader.submit(load)

    def _start(self, free: list[int], source: JobSource, running: dict[int, Job], obs: dict[int, Any]) -> None:
        """Begin the next episodes the source lets start on the free slots (one reset call per round)."""
        while free:
            jobs = source.take(len(free))
            if not jobs:
                return
            batch = list(zip(free, jobs))
            results = self._timed("env_s", self.fleet.reset, [s for s, _ in batch], [job.deal_seed for job in jobs])
            free = []
            for (s, job), o in zip(batch, results):
                if o.done:  # an environment may end an episode at reset
                    self._finish(job.episode, o)
                    source.finished(job)
                    free.append(s)
                else:
                    running[s], obs[s] = job, o

    def _timed(self, phase: str, fn: Callable[..., list[Any]], *args: Any) -> list[Any]:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            with self._lock:
                self._timing[phase] += time.perf_counter() - t0

    @staticmethod
    def _finish(ep: Episode, obs: Any) -> None:
        ep.env_return = float(obs.reward or 0.0)
        ep.failed = bool(getattr(obs, "failed", False))
        ep.outcome = _outcome(obs) or ("win" if ep.env_return > 0 else "loss" if ep.env_return < 0 else "push")
