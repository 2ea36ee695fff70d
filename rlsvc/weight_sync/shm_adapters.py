"""LoRA adapters through shared memory: trainer rank 0 writes each policy version's PEFT folder
once under /dev/shm, and every rollout worker on the node registers that same folder with its
engine (vLLM 0.32 reads an adapter only from a path, so the folder is the transfer). The last
`keep` versions' folders stay (`buffer.max_staleness + 1`: an episode finishes under the adapter
it started with); the engines check each version's digest against what they read.

The two endpoints, run inside trainer rank 0 and each rollout worker; the driver side is
rlsvc/cluster/weight_sync/shm_adapters.py.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any


def adapter_folder(root: str | Path, version: int) -> Path:
    return Path(root) / f"v{version:010d}"


class ShmAdapterSender:
    def __init__(self, publisher: Any, root: str, keep: int) -> None:
        self.publisher, self.root, self.keep = publisher, Path(root), keep
        self.root.mkdir(parents=True, exist_ok=True)
        self.written: list[int] = []

    def write(self, version: int, from_snapshot: bool = False) -> float:
        """Write the staged version's folder (the adapters were copied out of the live model when
        staged, so the trainer may step on meanwhile) and drop the versions out of the window."""
        from rlsvc.trainer.lora import write_peft_folder

        t0 = time.perf_counter()
        m = self.publisher.manifest
        if m is None or m.version != version or m.adapter_config is None:
            raise RuntimeError(f"no adapter staged as version {version}")
        write_peft_folder(adapter_folder(self.root, version), {s.name: self.publisher.tensor(s.name) for s in m.specs}, m.adapter_config)
        self.written.append(version)
        for old in self.written[: -self.keep]:
            shutil.rmtree(adapter_folder(self.root, old), ignore_errors=True)
        self.written = self.written[-self.keep :]
        return time.perf_counter() - t0

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class ShmAdapterReceiver:
    def __init__(self, engine: Any, root: str) -> None:
        self.engine, self.root = engine, root

    def pull(self, manifest: Any) -> dict[str, float | str]:
        return self.engine.load_adapter_version(str(adapter_folder(self.root, manifest.version)), manifest)  # type: ignore[no-any-return]
