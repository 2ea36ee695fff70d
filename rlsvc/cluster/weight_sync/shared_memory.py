"""The driver side of the shared-memory transport (rlsvc/weight_sync/shared_memory.py): one file
under /dev/shm holds the engines' weights; trainer rank 0 writes each version into it."""

from __future__ import annotations

import time
import uuid
from typing import Any

import ray

from rlsvc.cluster.errors import translated
from rlsvc.cluster.weight_sync.base import RayWeightSync
from rlsvc.weight_sync.base import Staged
from rlsvc.weight_sync.shared_memory import SHM_DIR


class ShmSync(RayWeightSync):
    def __init__(self, trainers: list[Any], rollout_workers: list[Any], **kwargs: Any) -> None:
        super().__init__(trainers, rollout_workers, **kwargs)
        nodes = set(ray.get([a.node_id.remote() for a in [trainers[0], *rollout_workers]]))
        if len(nodes) > 1:
            raise ValueError(
                "weight_sync.type=shm needs trainer rank 0 and every rollout worker on one node; use monarch, ray or broadcast across nodes"
            )
        self.path = str(SHM_DIR / f"rlsvc-weights-{uuid.uuid4().hex[:12]}")
        size, plan = ray.get(rollout_workers[0].ws_open.remote("shm", self.path, True))
        ray.get([w.ws_open.remote("shm", self.path, False) for w in rollout_workers[1:]])
        # the trainer last: it unlinks the file once it has mapped it (ShmSender)
        ray.get(trainers[0].ws_open.remote("shm", self.path, size, plan))

    def _write(self, manifest: Any, from_snapshot: bool) -> dict[str, float]:
        t0 = time.perf_counter()
        ray.get([w.ws_begin.remote(manifest) for w in self.workers])
        write_s = ray.get(self.trainers[0].ws_write.remote(manifest.version, from_snapshot))
        results = ray.get([w.finish_update.remote() for w in self.workers])
        return {"sync/transfer_s": write_s, "sync/load_s": max(r["load_s"] for r in results), "sync/apply_s": time.perf_counter() - t0}

    @translated
    def stage(self, version: int) -> Staged:
        staged = self._stage_with(version, lambda: self.trainers[0].ws_snapshot.remote(), "pack")
        staged.timings["sync/bytes"] = float(staged.manifest.total_bytes)
        return staged

    @translated
    def apply(self, staged: Staged) -> dict[str, float]:
        return self._write(staged.manifest, from_snapshot=True)

    @translated
    def push(self, version: int) -> dict[str, float]:
        """Synchronous: the trainer is idle, so it writes from its live parameters (one copy)."""
        t0 = time.perf_counter()
        manifest = self._gather(version, lazy=True)
        out = self._write(manifest, from_snapshot=False)
        total = {"sync/total_s": time.perf_counter() - t0, "sync/bytes": float(manifest.total_bytes)}
        return {"sync/gather_s": manifest.timings["gather_s"], **out, **total}
