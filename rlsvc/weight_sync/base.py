"""The weight-sync interface: move the trainer's weights into every rollout engine, in place.

One interface, one file per transport, chosen by `weight_sync.type`. A push returns its phase
timings so the slow phase (gather, transfer, load) is visible in MLflow.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class WeightSync(ABC):
    @abstractmethod
    def push(self, version: int) -> dict[str, float]:
        """Publish the trainer's current weights as `version`; return after every rollout worker
        holds them (synchronous mode), with timings in seconds."""


def build_weight_sync(kind: str, trainers: list[Any], rollout_workers: list[Any]) -> WeightSync:
    if kind == "ray":
        from rlsvc.weight_sync.ray_object_store import RayObjectStoreSync

        return RayObjectStoreSync(trainers, rollout_workers)
    raise ValueError(f"weight_sync.type={kind!r} is not available (known: ray)")
