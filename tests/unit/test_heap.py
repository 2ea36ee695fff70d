"""rlsvc/heap.py: after `freeze_startup_heap` the objects alive at that point are out of the
collector's generations (a full pass no longer walks them), and garbage made afterwards is still
collected. In its own process: freezing is process-wide."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import gc, json, weakref
import torch  # a start-up heap of realistic size
from rlsvc.heap import freeze_startup_heap
tracked_before = len(gc.get_objects())
frozen = freeze_startup_heap()
class Node: pass
a, b = Node(), Node()
a.other, b.other = b, a  # a cycle: only the collector can free it
alive = weakref.ref(a)
del a, b
gc.collect()
print(json.dumps({"before": tracked_before, "frozen": frozen, "after": len(gc.get_objects()), "cycle_freed": alive() is None}))
"""


def test_startup_objects_leave_the_collector_and_new_garbage_is_still_collected() -> None:
    out = json.loads(subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True).stdout)
    assert out["before"] > 50_000, out  # torch alone brings tens of thousands of tracked objects
    assert out["frozen"] >= out["before"] * 0.9, out
    assert out["after"] < out["before"] / 20, out  # what a full pass walks now
    assert out["cycle_freed"], out
