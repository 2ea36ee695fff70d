"""Weights through Ray's object store.

Trainer rank 0 streams the version as a Ray generator: first the manifest, then one object per
bucket. The driver hands each bucket's reference to every rollout worker as soon as it exists, so
a worker copies bucket i into its engine while bucket i+1 is being put. With
RAY_ENABLE_ZERO_COPY_TORCH_TENSORS=1 (set for the trainer and rollout actors, cluster/placement.py
`TENSOR_ROLES`) a bucket is one copy into shared memory and the workers read it in place: two
copies end to end, overlapped.

Driver side only: the trainer's half is its `ws_stream` generator and the publisher
(rlsvc/cluster/actors.py, rlsvc/weight_sync/publisher.py); the workers' is `begin_update`,
`load_bucket` and `finish_update`.
"""

from __future__ import annotations

import time
from typing import Any

import ray

from rlsvc.cluster.errors import translated
from rlsvc.cluster.weight_sync.base import RayWeightSync
from rlsvc.weight_sync.base import Staged


def _finish(workers: list[Any], begins: list[Any], loads: list[Any]) -> list[dict]:
    finishes = [w.finish_update.remote() for w in workers]
    ray.get(begins)  # a refused version (stale, incomplete) is the error to report, not its echoes
    ray.get(loads)
    return ray.get(finishes)


class RayObjectStoreSync(RayWeightSync):
    def _stream(self, version: int) -> tuple[Any, list[Any], Any]:
        gen = self.trainers[0].ws_stream.options(num_returns="streaming").remote(version)
        others = [t.ws_stage.remote(version) for t in self.trainers[1:]]  # their half of the gather
        manifest = ray.get(next(gen))
        ray.get(others)
        return gen, others, manifest

    @translated
    def stage(self, version: int) -> Staged:
        t0 = time.perf_counter()
        gen, _, manifest = self._stream(version)
        refs = list(gen)
        ray.wait(refs, num_returns=len(refs), fetch_local=False)
        timings = {
            "sync/gather_s": manifest.timings["gather_s"],
            "sync/stage_s": time.perf_counter() - t0,
            "sync/bytes": float(manifest.total_bytes),
        }
        return Staged(manifest, refs, timings)

    @translated
    def apply(self, staged: Staged) -> dict[str, float]:
        t0 = time.perf_counter()
        begins = [w.begin_update.remote(staged.manifest) for w in self.workers]
        loads = [w.load_bucket.remote(ref) for ref in staged.handles for w in self.workers]
        results = _finish(self.workers, begins, loads)
        return {"sync/apply_s": time.perf_counter() - t0, "sync/load_s": max(r["load_s"] for r in results)}

    @translated
    def push(self, version: int) -> dict[str, float]:
        t0 = time.perf_counter()
        gen, _, manifest = self._stream(version)
        t_gather = time.perf_counter()
        begins = [w.begin_update.remote(manifest) for w in self.workers]
        loads = [w.load_bucket.remote(ref) for ref in gen for w in self.workers]
        t_sent = time.perf_counter()
        results = _finish(self.workers, begins, loads)
        return {
            "sync/gather_s": manifest.timings["gather_s"],
            "sync/transfer_s": t_sent - t_gather,
            "sync/load_s": max(r["load_s"] for r in results),
            "sync/total_s": time.perf_counter() - t0,
            "sync/bytes": float(manifest.total_bytes),
        }
