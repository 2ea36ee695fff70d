"""The weight-sync interface and the actor-side endpoints are plain Python: importing them loads
no Ray (the transports' driver side is rlsvc/cluster/weight_sync/)."""

import subprocess
import sys

from rlsvc.weight_sync.base import Staged, WeightSync, choose_transport
from rlsvc.weight_sync.manifest import build_manifest

RAY_FREE = [
    "rlsvc.weight_sync.availability",
    "rlsvc.weight_sync.base",
    "rlsvc.weight_sync.broadcast",
    "rlsvc.weight_sync.endpoints",
    "rlsvc.weight_sync.manifest",
    "rlsvc.weight_sync.monarch_rdma",
    "rlsvc.weight_sync.publisher",
    "rlsvc.weight_sync.shared_memory",
    "rlsvc.weight_sync.shm_adapters",
    "rlsvc.weight_sync.torchstore",
]


def test_weight_sync_modules_import_without_ray():
    code = f"import sys\nfor m in {RAY_FREE!r}: __import__(m)\nprint(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


class _Recorded(WeightSync):
    def __init__(self) -> None:
        self.applied: list[int] = []

    def stage(self, version: int) -> Staged:
        return Staged(build_manifest(version, {}, 1 << 20), timings={"sync/gather_s": 0.5})

    def apply(self, staged: Staged) -> dict[str, float]:
        self.applied.append(staged.manifest.version)
        return {"sync/load_s": 0.25}

    def close(self, timeout_s: float | None = None) -> None:
        pass


def test_push_is_stage_then_apply_with_every_phase_timed():
    sync = _Recorded()
    timings = sync.push(7)
    assert sync.applied == [7]
    assert timings["sync/gather_s"] == 0.5 and timings["sync/load_s"] == 0.25
    assert timings["sync/total_s"] >= 0


def test_auto_transport_is_shared_memory_on_one_node():
    assert choose_transport(["n1", "n1", "n1"], monarch=True) == "shm"
    assert choose_transport(["n1", "n2", "n1"], monarch=True) == "monarch"
    assert choose_transport(["n1", "n2"], monarch=False) == "broadcast"
