"""The driver half shared by every transport (set-up, gather, close through the actors' handles).
The interface itself is rlsvc/weight_sync/base.py; `build_weight_sync`, which picks a transport by
`weight_sync.type`, is the package's (rlsvc/cluster/weight_sync/__init__.py): a base never
imports its implementations."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ray

from rlsvc.cluster.errors import translated
from rlsvc.weight_sync.base import Staged, WeightSync

if TYPE_CHECKING:
    from rlsvc.weight_sync.manifest import Manifest


class RayWeightSync(WeightSync):
    """A transport between trainer ranks (`TrainerWorker` handles) and rollout workers
    (`RolloutWorker` handles), driven from the job's driver."""

    def __init__(self, trainers: list[Any], rollout_workers: list[Any], bucket_bytes: int = 64 << 20, verify: bool = True) -> None:
        self.trainers = trainers
        self.workers = rollout_workers
        ray.get([t.ws_configure.remote(bucket_bytes, verify) for t in trainers])

    def _gather(self, version: int, lazy: bool = False) -> Manifest:
        """Every trainer rank stages `version` (the FSDP gather is a collective); rank 0's manifest."""
        return ray.get([t.ws_stage.remote(version, lazy) for t in self.trainers])[0]

    def _stage_with(self, version: int, rank0_call: Callable[[], Any], phase: str) -> Staged:
        """Gather `version` on every rank, then rank 0's transport-specific staging call (an
        object ref of its seconds, or of (handles, seconds)), timed as `sync/<phase>_s`."""
        t0 = time.perf_counter()
        manifest = self._gather(version)
        out = ray.get(rank0_call())
        handles, seconds = out if isinstance(out, tuple) else ([], out)
        timings = {"sync/gather_s": manifest.timings["gather_s"], f"sync/{phase}_s": seconds, "sync/stage_s": time.perf_counter() - t0}
        return Staged(manifest, handles, timings)

    @translated  # a dead or silent end is expected here; any other Ray failure is the job's
    def close(self, timeout_s: float | None = None) -> None:
        for ref in [t.ws_close.remote() for t in self.trainers] + [w.ws_close.remote() for w in self.workers]:
            try:
                ray.get(ref, timeout=timeout_s)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                pass


def node_ips(actors: list[Any]) -> list[str]:
    """The IP address Ray registered for each actor's node (what `ray.util.get_node_ip_address()`
    returns inside the actor): for the endpoints that listen on their node's address (the
    broadcast group's store, Monarch's transport), which are plain Python and do not ask Ray."""
    node_ids = ray.get([a.node_id.remote() for a in actors])
    address = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")}
    return [address[i] for i in node_ids]
