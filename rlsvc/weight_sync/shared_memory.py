"""Weights written once, by the trainer, straight into the memory the engines compute with.

For trainer rank 0 and rollout workers on one node (a laptop, one GPU box). At set-up the first
engine moves its live parameters into a file under /dev/shm and the others map the same file
(rlsvc/rollout/shared_weights.py), and the engine reports where vLLM puts each checkpoint tensor
(its own `load_weights`, run on probe tensors, decides). A push is then: workers mark the update
pending (generation refused), trainer rank 0 copies each tensor to its place in the file (the
one copy of every byte), workers run vLLM's post-load step and check the digest of what they now
serve. On GPUs the same shape is CUDA IPC between colocated processes.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import ray
import torch

from rlsvc.weight_sync.base import Staged, WeightSync
from rlsvc.weight_sync.manifest import views

SHM_DIR = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")


class ShmSender:
    def __init__(self, publisher: Any, path: str, size: int, plan: Any) -> None:
        from rlsvc.rollout.shared_weights import apply_plan

        self.publisher = publisher
        self.path, self.plan, self._apply = Path(path), plan, apply_plan
        self.flat = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
        self.snapshot_version = -1

    def snapshot(self) -> float:
        """Copy the staged version aside (the asynchronous loop's stage: the trainer may step again)."""
        t0 = time.perf_counter()
        self.publisher.flat(0)
        self.snapshot_version = self.publisher.manifest.version
        return time.perf_counter() - t0

    def write(self, version: int, from_snapshot: bool) -> float:
        """Copy version `version` into the engines' shared weights (they are paused)."""
        t0 = time.perf_counter()
        m = self.publisher.manifest
        if from_snapshot:
            if self.snapshot_version != version:
                raise RuntimeError(f"snapshot holds version {self.snapshot_version}, not {version}")
            tensors = dict(views(self.publisher.flat_buffer(0), m.specs))
        else:
            if m.version != version:
                raise RuntimeError(f"staged version is {m.version}, not {version}")
            tensors = {s.name: self.publisher.raw(s.name) for s in m.specs}
        self._apply(self.flat, self.plan, tensors)
        return time.perf_counter() - t0

    def close(self) -> None:
        self.path.unlink(missing_ok=True)  # the engines keep their mappings


class ShmReceiver:
    def __init__(self, engine: Any, path: str, create: bool) -> None:
        self.engine = engine
        self.size, self.plan = engine.share_weights(path, create)

    def info(self) -> tuple[int, Any]:
        return self.size, self.plan

    def begin(self, manifest: Any) -> None:
        self.engine.begin_update(manifest, direct=True)


class ShmSync(WeightSync):
    def __init__(self, trainers: list[Any], rollout_workers: list[Any], **kwargs: Any) -> None:
        super().__init__(trainers, rollout_workers, **kwargs)
        nodes = set(ray.get([a.node_id.remote() for a in [trainers[0], *rollout_workers]]))
        if len(nodes) > 1:
            raise ValueError("weight_sync.type=shm needs trainer rank 0 and every rollout worker on one node; use monarch, ray or broadcast across nodes")
        path = str(SHM_DIR / f"rlsvc-weights-{uuid.uuid4().hex[:12]}")
        size, plan = ray.get(rollout_workers[0].ws_open.remote("shm", path, True))
        ray.get([w.ws_open.remote("shm", path, False) for w in rollout_workers[1:]])
        ray.get(trainers[0].ws_open.remote("shm", path, size, plan))

    def _write(self, manifest: Any, from_snapshot: bool) -> dict[str, float]:
        t0 = time.perf_counter()
        ray.get([w.ws_call.remote("begin", manifest) for w in self.workers])
        write_s = ray.get(self.trainers[0].ws_call.remote("write", manifest.version, from_snapshot))
        results = ray.get([w.finish_update.remote() for w in self.workers])
        return {"sync/transfer_s": write_s, "sync/load_s": max(r["load_s"] for r in results), "sync/apply_s": time.perf_counter() - t0}

    def stage(self, version: int) -> Staged:
        t0 = time.perf_counter()
        manifest = self._gather(version)
        pack_s = ray.get(self.trainers[0].ws_call.remote("snapshot"))
        return Staged(manifest, [], {"sync/gather_s": manifest.timings["gather_s"], "sync/pack_s": pack_s, "sync/stage_s": time.perf_counter() - t0})

    def apply(self, staged: Staged) -> dict[str, float]:
        return self._write(staged.manifest, from_snapshot=True)

    def push(self, version: int) -> dict[str, float]:
        """Synchronous: the trainer is idle, so it writes from its live parameters (one copy)."""
        t0 = time.perf_counter()
        manifest = self._gather(version, lazy=True)
        out = self._write(manifest, from_snapshot=False)
        return {"sync/gather_s": manifest.timings["gather_s"], **out, "sync/total_s": time.perf_counter() - t0}

