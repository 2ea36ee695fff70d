"""Adapters that make groups of Ray actors look like the runner's `Generator` and `EnvFleet`:
calls fan out to every actor at once and the results come back in the caller's order."""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import ray

from rlsvc.cluster.errors import actor_died
from rlsvc.episode import FailedObservation
from rlsvc.rollout.runner import RolloutWorkerLost

log = logging.getLogger(__name__)


@dataclass
class LostEpisode(FailedObservation):
    """What the runner sees for a session whose env actor died mid-call: the episode is over and
    failed, so its group is left out of training (counted, never trained on half-played)."""

    error: str = "its env actor died"
    outcome: str = "env_lost"


@dataclass
class EnvCallFailed(FailedObservation):
    """What the runner sees for a session whose env actor raised during the call (the actor is
    alive; its pool or environment failed): the episode ends failed and only its group is left
    out, never the other actors' episodes or the training step."""

    outcome: str = "env_error"


class EnvActorGone(RuntimeError):
    pass


class RayGenerator:
    """Splits a batch of prompts evenly over the rollout workers. `workers` is the job's list
    of rollout actors itself, so a replaced worker is used from the next call on."""

    def __init__(self, workers: list[Any], greedy: bool = False) -> None:
        self.workers = workers
        self.greedy = greedy

    def generate(self, prompts: list[list[int]], seeds: list[int], versions: list[int] | None = None) -> list[dict]:
        """`versions`: with LoRA, each prompt's policy version (its episode's adapter)."""
        n, k = len(prompts), len(self.workers)
        bounds = [round(i * n / k) for i in range(k + 1)]
        part = {} if versions is None else {"versions": versions}
        refs = [
            (
                i,
                w.generate.remote(
                    prompts[bounds[i] : bounds[i + 1]],
                    seeds[bounds[i] : bounds[i + 1]],
                    self.greedy,
                    **{k: v[bounds[i] : bounds[i + 1]] for k, v in part.items()},
                ),
            )
            for i, w in enumerate(self.workers)
            if bounds[i + 1] > bounds[i]
        ]
        out: list[dict] = []
        lost: list[int] = []
        for i, ref in refs:
            try:
                out += ray.get(ref)
            except ray.exceptions.RayActorError:
                lost.append(i)
            except ray.exceptions.RayError as err:  # an engine's own error: not a death to replace
                raise actor_died(err) from err
        if lost:
            raise RolloutWorkerLost(lost)
        return out


class RayEnvFleet:
    """Slot s lives on env actor s // sessions_per_actor, session s % sessions_per_actor.

    An env actor that dies (crash, lost node) is restarted by Ray (`faults.max_actor_restarts`);
    the sessions it held are gone, so their episodes come back as `LostEpisode`s and later calls
    reach the restarted actor (a reset waits for it). An actor that fails `max_consecutive_failures` calls in a row
    (its restarts used up) stops the job. A call that raises in a live actor fails the episodes
    it carried (`EnvCallFailed`) and counts in the same streak, so an actor broken for good
    still stops the job."""

    def __init__(
        self, actors: list[Any], sessions_per_actor: int, max_consecutive_failures: int = 3, restart_wait_s: float = 300.0
    ) -> None:
        self.actors = actors
        self.per_actor = sessions_per_actor
        self.num_slots = len(actors) * sessions_per_actor
        self.max_consecutive_failures = max_consecutive_failures
        self.restart_wait_s = restart_wait_s
        """How long a reset waits for a restarting actor (its OpenEnv server starting again)."""
        self.failures = 0
        """Env actor calls lost to a dead actor since `take_failures` was last called."""
        self._streak = [0] * len(actors)
        self._lock = threading.Lock()  # the runner's slot groups call from their own threads

    def take_failures(self) -> int:
        with self._lock:
            n, self.failures = self.failures, 0
        return n

    def _failed(self, a: int | None = None) -> int:
        """Count one lost call (and, with `a`, one more in that actor's streak); the streak."""
        with self._lock:
            self.failures += 1
            if a is None:
                return 0
            self._streak[a] += 1
            return self._streak[a]

    def session_stats(self) -> dict[str, int]:
        """The env actors' session counters, summed (rlsvc/envs/openenv_pool.py `EnvPool.stats`:
        sessions lost, reconnects, capacity refusals, since each actor started). An actor that is
        down or restarting is left out: these are for watching, never a reason to stop a step."""
        totals: dict[str, int] = defaultdict(int)
        for ref in [a.stats.remote() for a in self.actors]:
            try:
                stats = ray.get(ref, timeout=30)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                continue
            for key, value in stats.items():
                totals[key] += value
        return dict(totals)

    def _fan_out(self, method: str, slots: list[int], args: list[Any]) -> list[Any]:
        by_actor: dict[int, list[tuple[int, int, Any]]] = defaultdict(list)
        for pos, (slot, arg) in enumerate(zip(slots, args)):
            by_actor[slot // self.per_actor].append((pos, slot % self.per_actor, arg))
        refs = {
            a: getattr(self.actors[a], method).remote([s for _, s, _ in items], [x for _, _, x in items]) for a, items in by_actor.items()
        }
        out: list[Any] = [None] * len(slots)
        for a, items in by_actor.items():
            values = self._result(a, refs[a], method, [s for _, s, _ in items], [x for _, _, x in items])
            for (pos, _, _), value in zip(items, values):
                out[pos] = value
        return out

    def _result(self, a: int, ref: Any, method: str, sessions: list[int], args: list[Any]) -> list[Any]:
        """One actor's answer to a fan-out call, or `LostEpisode`s for the sessions it lost."""
        deadline = time.monotonic() + self.restart_wait_s
        while True:
            try:
                values = ray.get(ref)
                self._streak[a] = 0
                if any(isinstance(v, LostEpisode) for v in values):
                    self._failed()  # a restarted actor reported sessions begun on its predecessor
                return values
            except ray.exceptions.ActorUnavailableError:
                # Restarting. A reset begins new episodes, so it is simply sent again once the
                # actor is back; a step's sessions died with the old process.
                if method == "reset" and time.monotonic() < deadline:
                    time.sleep(0.5)
                    ref = getattr(self.actors[a], method).remote(sessions, args)
                    continue
                self._failed()
                log.warning("env actor %d is restarting: %d sessions of this %s lost", a, len(sessions), method)
                return [LostEpisode() for _ in sessions]
            except ray.exceptions.RayActorError as e:
                streak = self._failed(a)
                log.warning("env actor %d died during %s (%d sessions lost): %s", a, method, len(sessions), type(e).__name__)
                if streak >= self.max_consecutive_failures:
                    raise EnvActorGone(f"env actor {a} failed {streak} calls in a row (restarts used up?)") from e
                return [LostEpisode() for _ in sessions]
            except ray.exceptions.RayTaskError as e:  # the actor lives; its call raised
                streak = self._failed(a)
                cause = e.cause if isinstance(getattr(e, "cause", None), BaseException) else e
                log.warning(
                    "env actor %d raised during %s (%d episodes failed): %s: %s", a, method, len(sessions), type(cause).__name__, cause
                )
                if streak >= self.max_consecutive_failures:
                    raise EnvActorGone(f"env actor {a} failed {streak} calls in a row: {type(cause).__name__}: {cause}"[:500]) from e
                return [EnvCallFailed(f"{type(cause).__name__}: {' '.join(str(cause).split())[:300]}") for _ in sessions]
            except ray.exceptions.RayError as e:  # the env actor's own error (a bug), as before: for the job
                raise actor_died(e) from e

    def reset(self, slots: list[int], seeds: list[int]) -> list[Any]:
        return self._fan_out("reset", slots, seeds)

    def step(self, slots: list[int], actions: list[str]) -> list[Any]:
        return self._fan_out("step", slots, actions)
