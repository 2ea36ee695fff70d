"""Adapters that make groups of Ray actors look like the runner's `Generator` and `EnvFleet`:
calls fan out to every actor at once and the results come back in the caller's order."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import ray


class RayGenerator:
    """Splits a batch of prompts evenly over the rollout workers."""

    def __init__(self, workers: list[Any], greedy: bool = False) -> None:
        self.workers = workers
        self.greedy = greedy

    def generate(self, prompts: list[list[int]], seeds: list[int]) -> list[dict]:
        n, k = len(prompts), len(self.workers)
        bounds = [round(i * n / k) for i in range(k + 1)]
        refs = [
            w.generate.remote(prompts[bounds[i] : bounds[i + 1]], seeds[bounds[i] : bounds[i + 1]], self.greedy)
            for i, w in enumerate(self.workers)
            if bounds[i + 1] > bounds[i]
        ]
        return [out for part in ray.get(refs) for out in part]


class RayEnvFleet:
    """Slot s lives on env actor s // sessions_per_actor, session s % sessions_per_actor."""

    def __init__(self, actors: list[Any], sessions_per_actor: int) -> None:
        self.actors = actors
        self.per_actor = sessions_per_actor
        self.num_slots = len(actors) * sessions_per_actor

    def _fan_out(self, method: str, slots: list[int], args: list[Any]) -> list[Any]:
        by_actor: dict[int, list[tuple[int, int, Any]]] = defaultdict(list)
        for pos, (slot, arg) in enumerate(zip(slots, args)):
            by_actor[slot // self.per_actor].append((pos, slot % self.per_actor, arg))
        refs = {
            a: getattr(self.actors[a], method).remote([s for _, s, _ in items], [x for _, _, x in items])
            for a, items in by_actor.items()
        }
        out: list[Any] = [None] * len(slots)
        for a, items in by_actor.items():
            for (pos, _, _), value in zip(items, ray.get(refs[a])):
                out[pos] = value
        return out

    def reset(self, slots: list[int], seeds: list[int]) -> list[Any]:
        return self._fan_out("reset", slots, seeds)

    def step(self, slots: list[int], actions: list[str]) -> list[Any]:
        return self._fan_out("step", slots, actions)
