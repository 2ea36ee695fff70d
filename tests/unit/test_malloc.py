"""rlsvc/malloc.py: with `keep_freed_memory`, a freed 200 MB tensor stays in the
process for reuse; without it glibc hands it back to the kernel. Each side runs in its own
process, since the setting is process-wide."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys, psutil, torch
from rlsvc.malloc import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else None
process = psutil.Process()
before = process.memory_info().rss
x = torch.ones(50_000_000)  # 200 MB, every page touched
del x
print(applied, (process.memory_info().rss - before) / 1e6)
"""


def held_mb(mode: str) -> tuple[str, float]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], check=True, capture_output=True, text=True).stdout.split()
    return out[0], float(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_memory_is_kept_only_when_asked() -> None:
    applied, kept = held_mb("keep")
    assert applied == "True"
    assert kept > 150, f"only {kept:.0f} MB of a freed 200 MB tensor stayed in the process"
    _, returned = held_mb("default")
    assert returned < 50, f"{returned:.0f} MB stayed without keep_freed_memory: the test would not tell the two apart"


def test_trainer_config_keeps_freed_memory_by_default() -> None:
    from rlsvc.config import load_config

    assert load_config(None, []).trainer.keep_freed_memory is True
    assert load_config(None, ["trainer.keep_freed_memory=false"]).trainer.keep_freed_memory is False


def test_rollout_spec_carries_keep_freed_memory_but_the_engine_never_sees_it() -> None:
    """The rollout worker applies it before building its engine; it is not a vLLM argument."""
    from rlsvc.config import load_config
    from rlsvc.rollout.spec import EngineSpec

    on = EngineSpec.from_config(load_config(None, []), None)
    off = EngineSpec.from_config(load_config(None, ["rollout.keep_freed_memory=false"]), None)
    assert (on.keep_freed_memory, off.keep_freed_memory) == (True, False)
    assert "keep_freed_memory" not in on.engine_kwargs()
