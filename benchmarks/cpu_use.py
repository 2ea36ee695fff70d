"""Where a job's CPU time goes: the cores each of its processes used, sampled with psutil.

A job started by a benchmark is a tree under the benchmark's process (the driver, the local Ray
cluster it starts, every actor); `CpuSampler` reads each process's CPU seconds once a second, by
role (the actor's class from Ray's process title, the driver, the rest of Ray), and the machine's
busy share. `cores(t0, t1)` keeps the samples inside a window, e.g. a job's training loop, so
start-up and the final evaluation do not count.
"""

from __future__ import annotations

import re
import threading
import time
from collections import defaultdict

import psutil

# Ray titles an actor's process `ray::<name>:<Class>.<method>` while its constructor runs (named
# actors), `ray::<Class>.<method>` or `ray::<Class>` after
_ACTOR = re.compile(r"ray::(?:rlsvc-(?P<name>[\w-]+):)?(?P<cls>[A-Za-z_]\w*)")


def role(cmdline: list[str]) -> str:
    """The actor's name without `rlsvc-` (`rollout-0`, `trainer-0`, `reference`, `env-0`, ...)
    or, seen after its constructor, its class; `driver` for the job's own process; `other` for
    the rest (Ray's daemons, idle workers)."""
    text = " ".join(cmdline)
    match = _ACTOR.match(text)
    if match and match.group("cls") not in ("IDLE", "DashboardAgent"):
        return match.group("name") or match.group("cls")
    return "driver" if "rlsvc.train" in text else "other"


class CpuSampler:
    """Samples the CPU use of this process's descendants every `interval_s` until `stop`."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.samples: list[tuple[float, float, dict[str, float]]] = []  # (time, busy cores of the machine, cores by role)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def cores(self, t0: float, t1: float) -> dict[str, float]:
        """Mean cores used by each role, and by the whole machine (`machine`), between t0 and t1
        (seconds since the epoch)."""
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if not inside:
            return {}
        out: dict[str, float] = defaultdict(float)
        for _, busy, by_role in inside:
            out["machine"] += busy
            for name, c in by_role.items():
                out[name] += c
        return {k: v / len(inside) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}

    def _run(self) -> None:
        me = psutil.Process()
        seen: dict[int, tuple[psutil.Process, str, float]] = {}
        last_t, last_cpu = time.time(), psutil.cpu_times()
        while not self._stop.wait(self.interval_s):
            now, cpu = time.time(), psutil.cpu_times()
            by_role: dict[str, float] = defaultdict(float)
            for proc in me.children(recursive=True):
                try:
                    t = proc.cpu_times()
                    used = t.user + t.system
                    if proc.pid not in seen or seen[proc.pid][0].create_time() != proc.create_time():
                        seen[proc.pid] = (proc, role(proc.cmdline()), used)
                        # born in this interval: all its CPU was used in it (a start-up's import burst);
                        # one seen first later (at the first sample) had used its CPU before we looked
                        if proc.create_time() >= last_t:
                            by_role[seen[proc.pid][1]] += used / (now - last_t)
                        continue
                    _, name, before = seen[proc.pid]
                    name = role(proc.cmdline()) if name == "other" else name  # a Ray worker becomes an actor
                    seen[proc.pid] = (proc, name, used)
                    by_role[name] += (used - before) / (now - last_t)
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    seen.pop(proc.pid, None)
            busy = sum(getattr(cpu, f) - getattr(last_cpu, f) for f in ("user", "system", "nice", "irq", "softirq"))
            self.samples.append((now, busy / (now - last_t), dict(by_role)))
            last_t, last_cpu = now, cpu
