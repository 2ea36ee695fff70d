"""The weight-sync interface: move the trainer's weights into every rollout engine, in place.

One interface, one file per transport, chosen by `weight_sync.type`. A version is published in
two halves, so the asynchronous loop can run them on different threads:

- `stage(version)`: the trainer side. Gather the full weights (an FSDP all-gather), snapshot them
  where the transport keeps them, and describe them in a `Manifest` (versioned keys, buckets,
  digest). After it returns the trainer may step again.
- `apply(staged)`: the rollout side. Every worker checks the manifest, pulls the buckets and
  copies them into its live vLLM engine, then verifies the digest. Called between generation
  batches; the engine is neither drained nor rebuilt.

`push(version)` is both, for the synchronous loop; a transport may overlap them. Every call
returns its phases in seconds (gather, transfer, load) so the slow one is visible in MLflow.
"""

from __future__ import annotations

import importlib.util
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlsvc.weight_sync.manifest import Manifest

TRANSPORTS = ("ray", "shm", "broadcast", "monarch", "torchstore")


@dataclass
class Staged:
    """A version that the trainer has published and the rollout workers may pull."""

    manifest: Manifest
    handles: list[Any] = field(default_factory=list)
    """Transport-specific: object refs of the buckets, RDMA buffers, ..."""
    timings: dict[str, float] = field(default_factory=dict)


class WeightSync(ABC):
    def __init__(self, trainers: list[Any], rollout_workers: list[Any], bucket_bytes: int = 64 << 20, verify: bool = True) -> None:
        import ray

        self.trainers = trainers
        self.workers = rollout_workers
        ray.get([t.ws_configure.remote(bucket_bytes, verify) for t in trainers])

    @abstractmethod
    def stage(self, version: int) -> Staged:
        """Publish the trainer's current weights as `version` (all trainer ranks take part)."""

    @abstractmethod
    def apply(self, staged: Staged) -> dict[str, float]:
        """Load `staged` into every rollout worker; returns when all of them serve it."""

    def push(self, version: int) -> dict[str, float]:
        t0 = time.perf_counter()
        staged = self.stage(version)
        return {**staged.timings, **self.apply(staged), "sync/total_s": time.perf_counter() - t0}

    def _gather(self, version: int, lazy: bool = False) -> Manifest:
        """Every trainer rank stages `version` (the FSDP gather is a collective); rank 0's manifest."""
        import ray

        return ray.get([t.ws_stage.remote(version, lazy) for t in self.trainers])[0]

    def close(self, timeout_s: float | None = None) -> None:
        """Release transport resources on every actor (files, registered buffers, stores); an
        actor that has died has nothing left to release, and one stuck past `timeout_s` (a
        trainer rank waiting in a collective for a dead peer) is about to be replaced."""
        import ray

        for ref in [t.ws_close.remote() for t in self.trainers] + [w.ws_close.remote() for w in self.workers]:
            try:
                ray.get(ref, timeout=timeout_s)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                pass


def unavailable_reason(kind: str) -> str | None:
    """Why transport `kind` cannot run in this environment (None when it can). Checked when the
    config is validated, so a bad choice fails before any cluster starts."""
    if kind == "monarch" and importlib.util.find_spec("monarch") is None:
        return "weight_sync.type=monarch needs torchmonarch (pip install torchmonarch==0.7.0)"
    if kind == "torchstore":
        from rlsvc.weight_sync.availability import torchstore_unavailable_reason

        return torchstore_unavailable_reason()
    return None


def build_weight_sync(kind: str, trainers: list[Any], rollout_workers: list[Any], bucket_mb: int = 64, verify: bool = True) -> WeightSync:
    cls = _transport_class(kind)
    return cls(trainers, rollout_workers, bucket_bytes=bucket_mb << 20, verify=verify)


def _transport_class(kind: str) -> type[WeightSync]:
    reason = unavailable_reason(kind)
    if reason:
        raise ValueError(reason)
    if kind == "ray":
        from rlsvc.weight_sync.ray_object_store import RayObjectStoreSync

        return RayObjectStoreSync
    if kind == "shm":
        from rlsvc.weight_sync.shared_memory import ShmSync

        return ShmSync
    if kind == "broadcast":
        from rlsvc.weight_sync.broadcast import BroadcastSync

        return BroadcastSync
    if kind == "monarch":
        from rlsvc.weight_sync.monarch_rdma import MonarchSync

        return MonarchSync
    if kind == "torchstore":
        from rlsvc.weight_sync.torchstore import TorchStoreSync

        return TorchStoreSync
    raise ValueError(f"weight_sync.type={kind!r} is not a transport (known: {', '.join(TRANSPORTS)})")
