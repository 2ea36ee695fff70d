"""Weights written once, by the trainer, straight into the memory the engines compute with.

For trainer rank 0 and rollout workers on one node (a laptop, one GPU box). At set-up the first
engine moves its live parameters into a file under /dev/shm and the others map the same file
(rlsvc/rollout/shared_weights.py), and the engine reports where vLLM puts each checkpoint tensor
(its own `load_weights`, run on probe tensors, decides). A push is then: workers mark the update
pending (generation refused), trainer rank 0 copies each tensor to its place in the file (the
one copy of every byte), workers run vLLM's post-load step and check the digest of what they now
serve. On GPUs the same shape is CUDA IPC between colocated processes.

The two endpoints, run inside trainer rank 0 and each rollout worker; the driver side is
rlsvc/cluster/weight_sync/shared_memory.py.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from rlsvc.weight_sync.manifest import views

SHM_DIR = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")


class ShmSender:
    def __init__(self, publisher: Any, path: str, size: int, plan: Any) -> None:
        from rlsvc.rollout.shared_weights import apply_plan

        self.publisher = publisher
        self.path, self.plan, self._apply = Path(path), plan, apply_plan
        self.flat = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
        # The driver opens this end after every engine has mapped the file, so nothing opens it
        # again (a rebuilt transport makes a new one): unlinked now, its memory goes back to the
        # system when the last process mapping it exits, even a killed one.
        self.path.unlink(missing_ok=True)
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
        """Nothing to free here: the file was unlinked at set-up, and each process's mapping goes
        with the process."""


class ShmReceiver:
    def __init__(self, engine: Any, path: str, create: bool) -> None:
        self.engine = engine
        self.size, self.plan = engine.share_weights(path, create)

    def info(self) -> tuple[int, Any]:
        return self.size, self.plan

    def begin(self, manifest: Any) -> None:
        self.engine.begin_update(manifest, direct=True)
