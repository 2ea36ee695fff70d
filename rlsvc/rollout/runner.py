"""The multi-turn rollout loop: generate the next decision for every live episode in one batched
call, apply the parsed actions in the environments, repeat until every episode has ended.

It depends only on two small interfaces, so it runs the same over Ray actor handles (see
`rlsvc.cluster.fleet`) and over plain in-process objects in tests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlsvc.buffer.replay import Episode


class RolloutWorkerLost(RuntimeError):
    """Rollout workers died during a generate call (a crash, a lost node); `indices` says which."""

    def __init__(self, indices: list[int]) -> None:
        super().__init__(f"rollout workers {indices} died")
        self.indices = indices


class Generator(Protocol):
    def generate(self, prompts: list[list[int]], seeds: list[int]) -> list[dict]:
        """One result per prompt: {"token_ids": [...], "logprobs": [...], "text": str}; raises
        `RolloutWorkerLost` when workers died during the call (the loop replaces them)."""
        ...


class EnvFleet(Protocol):
    num_slots: int

    def reset(self, slots: list[int], seeds: list[int]) -> list[Any]: ...

    def step(self, slots: list[int], actions: list[str]) -> list[Any]: ...


@dataclass
class FailedObservation:
    """What an env fleet returns for a session it could not play on (the environment sent
    something unreadable, its server or actor went away): the episode ends, `failed`, and its
    group is left out of training; `outcome` says why."""

    error: str = ""
    outcome: str = "env_failed"
    done: bool = True
    reward: float = 0.0
    failed: bool = True
    metadata: dict = field(default_factory=dict)


class PromptCodec(Protocol):
    """The task as the runner needs it (rlsvc.policy_io.TaskCodec): observation -> prompt token
    ids, sampled text -> action (None: an invalid answer), observation -> transcript record."""

    def encode(self, obs: Any) -> list[int]: ...

    def parse(self, text: str) -> Any | None: ...

    def observe(self, obs: Any) -> dict[str, Any]: ...

    def next_turn(self, sequence: list[int], obs: Any) -> list[int] | None: ...


class _Shared:
    """An iterator several threads take items from, each item once; `close` ends it for all."""

    def __init__(self, items: Iterator[Any]) -> None:
        self._items = items
        self._lock = threading.Lock()

    def __iter__(self) -> _Shared:
        return self

    def __next__(self) -> Any:
        with self._lock:
            return next(self._items)

    def close(self) -> None:
        with self._lock:
            self._items = iter(())


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

    def collect(self, group_seeds: Sequence[tuple[int, int]], group_size: int, version: int, sample_seed: int) -> list[Episode]:
        """Play `group_size` episodes from each (group_id, deal_seed); all of a group share the deal.

        Episodes stream through the fleet's slots: a slot whose episode ends starts the next one
        before the next generate call, so every call carries as many live episodes as there are
        slots, instead of waves that each wait for their longest hand (each env round trip, which
        may be a remote sandbox's, is paid once per call, not once per wave's turn).

        Results are in episode order; sampling seeds depend on (episode, turn) only, so the
        schedule (how many slots, which slot) does not change them.
        """
        jobs = [(gid, seed) for gid, seed in group_seeds for _ in range(group_size)]
        episodes = [Episode(group_id=gid, policy_version=version) for gid, _ in jobs]
        self._timing = {"generate_s": 0.0, "env_s": 0.0}
        self._lock = threading.Lock()
        waiting = _Shared(enumerate(jobs))
        slots = list(range(min(self.fleet.num_slots, len(jobs))))
        k = max(1, min(self.slot_groups, len(slots)))
        groups = [slots[len(slots) * g // k : len(slots) * (g + 1) // k] for g in range(k)]
        if k == 1:
            self._play(groups[0], waiting, episodes, sample_seed)
        else:  # each group streams episodes from the shared queue; seeds do not depend on which group
            errors: list[BaseException] = []

            def play(group: list[int]) -> None:
                try:
                    self._play(group, waiting, episodes, sample_seed)
                except BaseException as err:  # re-raised in the caller's thread below
                    errors.append(err)
                    waiting.close()

            threads = [threading.Thread(target=play, args=(g,), name=f"rlsvc-slots-{i}", daemon=True) for i, g in enumerate(groups)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
        self.last_timing = self._timing
        return episodes

    def _play(self, free: list[int], waiting: Iterator[tuple[int, tuple[int, int]]], episodes: list[Episode], sample_seed: int) -> None:
        """Play episodes from `waiting` on the slots `free` until none is left."""
        running: dict[int, int] = {}  # slot -> job
        obs: dict[int, Any] = {}  # slot -> the observation its episode acts on next
        observe = self.codec.observe
        while True:
            self._start(free, waiting, running, obs, episodes)
            if not running:
                return
            live, prompts, new_tokens = self._prompts(running, obs, episodes)
            if not live:  # every live episode ran out of room: start the next ones
                free = list(running)
                running.clear()
                continue
            seeds = [sample_seed * 1009 + len(episodes[running[s]].prompts) * 100_003 + running[s] for s in live]
            outs = self._timed("generate_s", self.generator.generate, prompts, seeds)
            free, to_step, actions = [], [], []
            for s, prompt, out in zip(live, new_tokens, outs):
                ep = episodes[running[s]]
                ep.prompts.append(prompt)
                ep.responses.append(list(out["token_ids"]))
                ep.logprobs.append(list(out["logprobs"]))
                ep.texts.append(out["text"])
                ep.observations.append(observe(obs[s]))
                action = self.codec.parse(out["text"])
                if action is None:
                    ep.invalid, ep.outcome = True, "invalid"
                    free.append(s)
                else:
                    to_step.append(s)
                    actions.append(action)
            new_obs = self._timed("env_s", self.fleet.step, to_step, actions) if to_step else []
            for s, o in zip(to_step, new_obs):
                ep = episodes[running[s]]
                if o.done:
                    self._finish(ep, o)
                elif len(ep.prompts) >= self.max_turns:
                    ep.outcome = "truncated"
                else:
                    obs[s] = o
                    continue
                free.append(s)
            free += [s for s in running if s not in live]  # cut for length by `_prompts`
            for s in free:
                del running[s]

    def _prompts(
        self, running: dict[int, int], obs: dict[int, Any], episodes: list[Episode]
    ) -> tuple[list[int], list[list[int]], list[list[int]]]:
        """(slots to generate for, their full prompts, the tokens each adds to its episode). With
        `context=episode` a later turn's prompt is the episode's sequence so far plus the reply;
        an episode with no room left to answer ends here, `truncated`."""
        live, prompts, new = [], [], []
        for s in sorted(running):
            ep = episodes[running[s]]
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

    def _start(
        self,
        free: list[int],
        waiting: Iterator[tuple[int, tuple[int, int]]],
        running: dict[int, int],
        obs: dict[int, Any],
        episodes: list[Episode],
    ) -> None:
        """Begin the next waiting episodes on the free slots (one reset call per round)."""
        while free:
            batch = list(zip(free, waiting))  # stops at whichever runs out first
            if not batch:
                return
            results = self._timed("env_s", self.fleet.reset, [s for s, _ in batch], [seed for _, (_, (_, seed)) in batch])
            free = []
            for (s, (j, _)), o in zip(batch, results):
                if o.done:  # an environment may end an episode at reset
                    self._finish(episodes[j], o)
                    free.append(s)
                else:
                    running[s], obs[s] = j, o

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
