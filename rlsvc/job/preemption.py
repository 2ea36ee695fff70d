"""Preemption: SIGTERM asks a job to stop, and it stops where it can resume.

Kubernetes deleting a pod, `ray job stop`, and batch schedulers reclaiming a node all send SIGTERM
first and SIGKILL after a grace period. On SIGTERM the training loop finishes the step in flight,
writes a checkpoint and the job exits with `EXIT_CODE` (128 + SIGTERM, what a process killed by
it reports); `python -m rlsvc.train --resume RUN_FOLDER` continues from there. A step that cannot
finish within the grace period is not waited for: `on_expired` runs then (the job exits at once,
and the newest periodic checkpoint is where a resume starts).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

EXIT_CODE = 128 + signal.SIGTERM


class Preemption:
    """SIGTERM handling for the driver: `install` after Ray is connected (`ray.init` installs its
    own SIGTERM handler, which exits at once), read `requested` between steps, `uninstall` at the
    end. A second SIGTERM changes nothing: the grace period runs from the first."""

    def __init__(self, grace_s: float, on_expired: Callable[[], Any]) -> None:
        self.grace_s = grace_s
        self.on_expired = on_expired
        self.requested_at: float | None = None
        self._timer: threading.Timer | None = None
        self._previous: Any = None
        self._installed = False

    @property
    def requested(self) -> bool:
        return self.requested_at is not None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread (an embedding caller's)
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        self._installed = True

    def uninstall(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested_at is not None:
            return
        self.requested_at = time.monotonic()
        # the timer's thread runs on_expired even while the main thread waits inside a Ray call
        self._timer = threading.Timer(self.grace_s, self.on_expired)
        self._timer.daemon = True
        self._timer.start()
