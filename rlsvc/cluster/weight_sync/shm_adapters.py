"""The driver side of LoRA's shared-memory transport (rlsvc/weight_sync/shm_adapters.py): trainer
rank 0 writes each version's adapter folder under /dev/shm (`stage`), every rollout worker on the
node registers it (`apply`). What `weight_sync.type=shm` (or `auto` on one node) runs with LoRA."""

from __future__ import annotations

import time
import uuid
from typing import Any

import ray

from rlsvc.cluster.errors import translated
from rlsvc.cluster.weight_sync.base import RayWeightSync
from rlsvc.weight_sync.base import Staged
from rlsvc.weight_sync.shared_memory import SHM_DIR


class ShmAdapterSync(RayWeightSync):
    def __init__(self, trainers: list[Any], rollout_workers: list[Any], keep: int = 1, **kwargs: Any) -> None:
        super().__init__(trainers, rollout_workers, **kwargs)
        nodes = set(ray.get([a.node_id.remote() for a in [trainers[0], *rollout_workers]]))
        if len(nodes) > 1:
            raise ValueError("weight_sync.type=shm needs trainer rank 0 and every rollout worker on one node; use ray across nodes")
        root = str(SHM_DIR / f"rlsvc-adapters-{uuid.uuid4().hex[:12]}")
        ray.get(
            [trainers[0].ws_open.remote("shm_adapters", root, keep), *(w.ws_open.remote("shm_adapters", root) for w in rollout_workers)]
        )

    @translated
    def stage(self, version: int) -> Staged:
        staged = self._stage_with(version, lambda: self.trainers[0].ws_write.remote(version, False), "write")
        staged.timings["sync/bytes"] = float(staged.manifest.total_bytes)
        return staged

    @translated
    def apply(self, staged: Staged) -> dict[str, float]:
        t0 = time.perf_counter()
        results = ray.get([w.ws_pull.remote(staged.manifest) for w in self.workers])
        return {"sync/apply_s": time.perf_counter() - t0, "sync/load_s": max(r["load_s"] for r in results)}
