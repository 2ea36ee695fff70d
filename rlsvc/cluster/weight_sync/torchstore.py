"""The driver side of the TorchStore transport (rlsvc/weight_sync/torchstore.py): trainer rank 0
hosts the store, and its controller handle goes to every rollout worker through Ray."""

from __future__ import annotations

import time
from typing import Any

import ray

from rlsvc.cluster.errors import translated
from rlsvc.cluster.weight_sync.base import RayWeightSync, node_ips
from rlsvc.weight_sync.base import Staged


class TorchStoreSync(RayWeightSync):
    def __init__(self, trainers: list[Any], rollout_workers: list[Any], **kwargs: Any) -> None:
        super().__init__(trainers, rollout_workers, **kwargs)
        trainer_ip, *worker_ips = node_ips([trainers[0], *rollout_workers])
        controller = ray.get(trainers[0].ws_open.remote("torchstore", trainer_ip))
        ray.get([w.ws_open.remote("torchstore", ip, controller) for w, ip in zip(rollout_workers, worker_ips)])

    @translated
    def stage(self, version: int) -> Staged:
        return self._stage_with(version, lambda: self.trainers[0].ws_put.remote(), "put")

    @translated
    def apply(self, staged: Staged) -> dict[str, float]:
        t0 = time.perf_counter()
        results = ray.get([w.ws_pull.remote(staged.manifest) for w in self.workers])
        return {
            "sync/transfer_s": max(r["get_s"] for r in results),
            "sync/load_s": max(r["load_s"] for r in results),
            "sync/apply_s": time.perf_counter() - t0,
        }
