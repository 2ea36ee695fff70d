"""One cgroup per sandbox run: limits on the run as a whole, and a kill that reaches every process.

Per-process limits (prlimit) let a run add up: several processes each under the address-space
limit together hold many times it. A cgroup bounds the run's processes together: memory (page
cache of the files it writes included), the number of processes and threads, and CPU time per
period. At the end of every run, whatever is left in the cgroup is killed and the cgroup removed.

cgroup v2 where the unified hierarchy at /sys/fs/cgroup offers the memory, pids and cpu
controllers (`memory.max`, `pids.max`, `cpu.max`, `cgroup.kill`); else cgroup v1's separate
hierarchies (`memory.limit_in_bytes`, `pids.max`, `cpu.cfs_quota_us`, and the freezer, so that no
process forks while the others are killed). Needs root (or a delegated subtree); where neither is
writable `available()` says why and the sandbox runs with its per-process limits only.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PARENT = "rlsvc-sandbox"  # every run's cgroup is a child of this one, in each hierarchy
V1_CONTROLLERS = ("memory", "pids", "cpu", "freezer")
CPU_PERIOD_US = 100_000


@dataclass(frozen=True)
class RunLimits:
    memory_bytes: int
    processes: int
    cpus: float
    """CPU time per wall-clock time (1.0: one core's worth)."""


def _v2_ready(root: Path) -> bool:
    try:
        controllers = set((root / "cgroup.controllers").read_text().split())
    except OSError:
        return False
    return {"memory", "pids", "cpu"} <= controllers


def available(root: Path = ROOT) -> str | None:
    """None when per-run cgroups can be made here, else why not (one line)."""
    try:
        if _v2_ready(root):
            parent = root / PARENT
            parent.mkdir(exist_ok=True)
            # a child's controllers must be enabled in its parent's subtree_control
            (root / "cgroup.subtree_control").write_text("+memory +pids +cpu")
            (parent / "cgroup.subtree_control").write_text("+memory +pids +cpu")
            return None
        missing = [c for c in V1_CONTROLLERS if not (root / c / "cgroup.procs").exists()]
        if missing:
            return f"no cgroup v2 memory/pids/cpu controllers and no cgroup v1 {', '.join(missing)} hierarchy under {root}"
        for c in V1_CONTROLLERS:
            (root / c / PARENT).mkdir(exist_ok=True)
        return None
    except OSError as e:
        return f"cannot create cgroups under {root}: {e.strerror or e}"


class RunCgroup:
    """The cgroup (v2) or cgroups (v1, one per controller) of one run."""

    def __init__(self, limits: RunLimits, root: Path = ROOT) -> None:
        name = f"run-{uuid.uuid4().hex[:16]}"
        self.v2 = _v2_ready(root)
        self.dirs = [root / PARENT / name] if self.v2 else [root / c / PARENT / name for c in V1_CONTROLLERS]
        for d in self.dirs:
            d.mkdir()
        quota = max(1000, int(limits.cpus * CPU_PERIOD_US))
        if self.v2:
            [d] = self.dirs
            (d / "memory.max").write_text(str(limits.memory_bytes))
            _write_if_present(d / "memory.swap.max", "0")
            (d / "pids.max").write_text(str(limits.processes))
            (d / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
        else:
            memory, pids, cpu, _ = self.dirs
            (memory / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
            _write_if_present(memory / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))  # no swap beyond it
            (pids / "pids.max").write_text(str(limits.processes))
            (cpu / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
            (cpu / "cpu.cfs_quota_us").write_text(str(quota))

    @property
    def procs_files(self) -> list[str]:
        """The files the run's first process writes its PID to, before it starts anything."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def _pids(self) -> set[int]:
        found: set[int] = set()
        for d in self.dirs:
            try:
                found |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
            except OSError:
                pass
        return found

    def out_of_memory(self) -> bool:
        """Whether the kernel's OOM killer acted inside the run's memory limit."""
        d = self.dirs[0]
        try:
            counts = (d / ("memory.events" if self.v2 else "memory.oom_control")).read_text()
            return int(dict(line.split() for line in counts.splitlines()).get("oom_kill", 0)) > 0
        except (OSError, ValueError):
            return False

    def kill(self, timeout_s: float = 10.0) -> None:
        """Kill every process in the run's cgroup: with `cgroup.kill` (v2), or frozen then
        SIGKILLed (v1: a frozen process cannot fork a new one in between). Returns once empty."""
        deadline = time.monotonic() + timeout_s
        while self._pids():
            if self.v2:
                _write_if_present(self.dirs[0] / "cgroup.kill", "1")
            else:
                freezer = self.dirs[3] / "freezer.state"
                _write_if_present(freezer, "FROZEN")
                for pid in self._pids():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                _write_if_present(freezer, "THAWED")  # killed processes only exit once thawed
            if time.monotonic() > deadline:
                raise TimeoutError(f"processes left in the run's cgroup after {timeout_s:g} s: {sorted(self._pids())}")
            time.sleep(0.01)

    def remove(self) -> None:
        """Kill what is left, then remove the cgroup(s)."""
        self.kill()
        for d in self.dirs:
            for _ in range(100):  # the kernel releases an emptied cgroup a moment after its last exit
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


def _write_if_present(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except FileNotFoundError:
        pass
