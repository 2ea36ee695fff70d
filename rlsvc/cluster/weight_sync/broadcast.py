"""The driver side of the broadcast transport (rlsvc/weight_sync/broadcast.py): a gloo group of
trainer rank 0 and every rollout worker, over a store that trainer rank 0 hosts on its node's
address."""

from __future__ import annotations

import time
from typing import Any

import ray

from rlsvc.cluster.errors import translated
from rlsvc.cluster.weight_sync.base import RayWeightSync, node_ips
from rlsvc.weight_sync.base import Staged


class BroadcastSync(RayWeightSync):
    def __init__(self, trainers: list[Any], rollout_workers: list[Any], **kwargs: Any) -> None:
        super().__init__(trainers, rollout_workers, **kwargs)
        world = 1 + len(rollout_workers)
        [node_ip] = node_ips(trainers[:1])
        address = ray.get(trainers[0].ws_open.remote("broadcast", node_ip, world))
        ray.get(
            [trainers[0].ws_connect.remote()]
            + [w.ws_open.remote("broadcast", address, i + 1, world) for i, w in enumerate(rollout_workers)]
        )

    @translated
    def stage(self, version: int) -> Staged:
        return self._stage_with(version, lambda: self.trainers[0].ws_snapshot.remote(), "pack")

    @translated
    def apply(self, staged: Staged) -> dict[str, float]:
        t0 = time.perf_counter()
        send = self.trainers[0].ws_send.remote()
        results = ray.get([w.ws_receive.remote(staged.manifest) for w in self.workers])
        send_s = ray.get(send)
        return {"sync/transfer_s": send_s, "sync/load_s": max(r["load_s"] for r in results), "sync/apply_s": time.perf_counter() - t0}
