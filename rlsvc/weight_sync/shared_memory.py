"""Weights through one shared-memory buffer per node: the fastest path when trainer rank 0 and
the rollout workers share a machine (a laptop, one GPU box).

This is what the object store does on one node, minus its per-version cost: every Ray `put`
lands in freshly allocated object memory and every reader maps it anew, so most of the time goes
to page faults (measured: about 1 GB/s for a 107M model). Here the trainer packs each version
into the same file under /dev/shm (mapped once, pages already resident), streaming a bucket
index to the driver as soon as the bucket is packed; each worker copies that bucket from its own
mapping of the file straight into its live engine. Two copies per byte, overlapped. Two slots
keep version v readable while v+1 is packed.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray
import torch

from rlsvc.weight_sync.base import Staged, WeightSync
from rlsvc.weight_sync.manifest import Manifest, views

SHM_DIR = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")


def _mapping(path: Path, nbytes: int) -> torch.Tensor:
    return torch.from_file(str(path), shared=True, size=nbytes, dtype=torch.uint8)


class ShmSender:
    def __init__(self, publisher: Any) -> None:
        self.publisher = publisher
        self.stem = f"rlsvc-weights-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.maps: dict[int, torch.Tensor] = {}

    def name(self) -> str:
        return self.stem

    def path(self, slot: int) -> Path:
        return SHM_DIR / f"{self.stem}-{slot}"

    def pack_stream(self) -> Iterator[tuple[int, int]]:
        """Pack the staged version bucket by bucket; yields (slot, bucket index) as each is ready."""
        m: Manifest = self.publisher.manifest
        slot = m.version % 2
        flat = self.maps.get(slot)
        if flat is None or flat.numel() != m.total_bytes:
            flat = self.maps[slot] = _mapping(self.path(slot), m.total_bytes)
        tensors = self.publisher.bucket
        for i, bucket in enumerate(m.buckets):
            start = m.bucket_bytes(i)[0]
            src = tensors(i)
            for name, dst in views(flat[start:], (m.specs[j] for j in bucket), base=start):
                dst.copy_(src[name])
            yield slot, i

    def close(self) -> None:
        self.maps.clear()
        for slot in (0, 1):
            self.path(slot).unlink(missing_ok=True)


class ShmReceiver:
    def __init__(self, engine: Any, stem_dir: str, stem: str) -> None:
        self.engine = engine
        self.dir, self.stem = Path(stem_dir), stem
        self.maps: dict[int, torch.Tensor] = {}
        self.manifest: Manifest | None = None

    def begin(self, manifest: Manifest) -> None:
        self.engine.begin_update(manifest)
        self.manifest = manifest

    def load(self, slot_bucket: tuple[int, int]) -> None:
        slot, i = slot_bucket
        m = self.manifest
        flat = self.maps.get(slot)
        if flat is None or flat.numel() != m.total_bytes:
            flat = self.maps[slot] = _mapping(self.dir / f"{self.stem}-{slot}", m.total_bytes)
        start = m.bucket_bytes(i)[0]
        self.engine.load_tensors(views(flat[start:], (m.specs[j] for j in m.buckets[i]), base=start))


class ShmSync(WeightSync):
    def __init__(self, trainers: list[Any], rollout_workers: list[Any], **kwargs: Any) -> None:
        super().__init__(trainers, rollout_workers, **kwargs)
        nodes = set(ray.get([a.node_id.remote() for a in [trainers[0], *rollout_workers]]))
        if len(nodes) > 1:
            raise ValueError("weight_sync.type=shm needs trainer rank 0 and every rollout worker on one node; use ray, broadcast or monarch across nodes")
        ray.get(trainers[0].ws_open.remote("shm"))
        stem = ray.get(trainers[0].ws_call.remote("name"))
        ray.get([w.ws_open.remote("shm", str(SHM_DIR), stem) for w in rollout_workers])

    def _stage_manifest(self, version: int) -> Manifest:
        return ray.get([t.ws_stage.remote(version) for t in self.trainers])[0]

    def _apply(self, manifest: Manifest, buckets: Any) -> dict[str, float]:
        """Workers copy each packed (slot, bucket) into their engines; `buckets` may be a live
        Ray generator (packing and loading overlap) or the list from an earlier `stage`."""
        t0 = time.perf_counter()
        begins = [w.ws_call.remote("begin", manifest) for w in self.workers]
        loads = [w.ws_call.remote("load", ref) for ref in buckets for w in self.workers]
        t_packed = time.perf_counter()
        ray.get(begins)
        ray.get(loads)
        results = ray.get([w.finish_update.remote() for w in self.workers])
        return {"sync/transfer_s": t_packed - t0, "sync/load_s": max(r["load_s"] for r in results), "sync/apply_s": time.perf_counter() - t0}

    def _pack(self) -> Any:
        return self.trainers[0].ws_call_stream.options(num_returns="streaming").remote("pack_stream")

    def stage(self, version: int) -> Staged:
        """Gather and pack the whole version (the asynchronous loop's snapshot: the optimiser may
        step once this returns)."""
        t0 = time.perf_counter()
        manifest = self._stage_manifest(version)
        packed = ray.get(list(self._pack()))
        return Staged(manifest, packed, {"sync/gather_s": manifest.timings["gather_s"], "sync/stage_s": time.perf_counter() - t0})

    def apply(self, staged: Staged) -> dict[str, float]:
        return self._apply(staged.manifest, staged.handles)

    def push(self, version: int) -> dict[str, float]:
        """Synchronous: pack bucket i+1 while the workers load bucket i."""
        t0 = time.perf_counter()
        manifest = self._stage_manifest(version)
        out = self._apply(manifest, self._pack())
        return {"sync/gather_s": manifest.timings["gather_s"], **out, "sync/total_s": time.perf_counter() - t0}

    def close(self) -> None:
        ray.get(self.trainers[0].ws_call.remote("close"))
