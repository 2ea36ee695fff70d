"""Weights through Ray's object store: rank 0's gathered state dict is put once and every rollout
worker reads it by reference (zero-copy on one node with RAY_ENABLE_ZERO_COPY_TORCH_TENSORS=1)."""

from __future__ import annotations

import time
from typing import Any

import ray

from rlsvc.weight_sync.base import WeightSync


class RayObjectStoreSync(WeightSync):
    def __init__(self, trainers: list[Any], rollout_workers: list[Any]) -> None:
        self.trainers = trainers
        self.workers = rollout_workers

    def push(self, version: int) -> dict[str, float]:
        t0 = time.perf_counter()
        # every rank takes part in the FSDP gather; rank 0 returns the full dict
        refs = [t.call.remote("hf_state_dict") for t in self.trainers]
        ray.wait([refs[0]])
        t_gather = time.perf_counter()
        loads = ray.get([w.update_weights.remote(refs[0], version) for w in self.workers])
        ray.get(refs[1:])
        return {
            "sync_s": time.perf_counter() - t0,
            "sync_gather_s": t_gather - t0,
            "sync_load_s": max(x.get("load_s", 0.0) for x in loads),
        }
