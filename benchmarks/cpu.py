"""CPU-seconds used by this process's descendants while a block runs. A job started by a
benchmark (`benchmarks/jobs.py`) is a tree under it: the driver, the local Ray cluster it
starts (GCS, raylet, dashboard, agents) and every actor's worker process. On a machine whose
cores are all busy during a job's start-up this is the cost that wall time hides: two jobs can
start in the same seconds while one leaves far less work for the cores.

The tree is sampled (psutil, installed with vLLM): a process's last fraction of a sampling
interval before it exits is not counted, a few hundredths of a second per process.
"""

from __future__ import annotations

import threading

import psutil


class DescendantsCPU:
    """`with DescendantsCPU() as cpu: ...`, then `cpu.seconds`: user + system CPU of every
    process that descended from this one while the block ran, sampled every `interval_s`."""

    def __init__(self, interval_s: float = 0.2) -> None:
        self.interval_s = interval_s
        self.seconds = 0.0
        self._last: dict[tuple[int, float], float] = {}  # (pid, create time) -> CPU seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="descendants-cpu", daemon=True)

    def __enter__(self) -> DescendantsCPU:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.seconds = sum(self._last.values())

    def _poll(self) -> None:
        me = psutil.Process()
        while True:
            for p in me.children(recursive=True):
                try:
                    with p.oneshot():
                        t = p.cpu_times()
                        self._last[(p.pid, p.create_time())] = t.user + t.system
                except psutil.Error:
                    pass  # gone between listing and reading
            if self._stop.wait(self.interval_s):
                return
