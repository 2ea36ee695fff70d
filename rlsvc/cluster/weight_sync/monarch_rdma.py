"""The driver side of the Monarch RDMA transport (rlsvc/weight_sync/monarch_rdma.py): trainer
rank 0 and every rollout worker join Monarch on their node's address; the buckets' RDMA handles
travel from the trainer to the workers through Ray."""

from __future__ import annotations

import time
from typing import Any

import ray

from rlsvc.cluster.errors import translated
from rlsvc.cluster.weight_sync.base import RayWeightSync, node_ips
from rlsvc.weight_sync.base import Staged


class MonarchSync(RayWeightSync):
    def __init__(self, trainers: list[Any], rollout_workers: list[Any], **kwargs: Any) -> None:
        super().__init__(trainers, rollout_workers, **kwargs)
        actors = [trainers[0], *rollout_workers]
        ray.get([a.ws_open.remote("monarch", ip) for a, ip in zip(actors, node_ips(actors))])

    @translated
    def stage(self, version: int) -> Staged:
        return self._stage_with(version, lambda: self.trainers[0].ws_snapshot.remote(), "pack")

    @translated
    def apply(self, staged: Staged) -> dict[str, float]:
        t0 = time.perf_counter()
        results = ray.get([w.ws_pull.remote(staged.manifest, staged.handles) for w in self.workers])
        return {
            "sync/transfer_s": max(r["pull_s"] - r["load_s"] for r in results),
            "sync/load_s": max(r["load_s"] for r in results),
            "sync/apply_s": time.perf_counter() - t0,
        }
