"""SIGTERM handling (rlsvc/job/preemption.py): the flag the training loop reads between steps, the
grace timer that ends a job whose step in flight does not finish, and the handler put back.
The whole path, a real job stopped by SIGTERM and resumed, is in
tests/e2e/test_quickstart_and_resume.py."""

from __future__ import annotations

import os
import signal
import threading
import time

from rlsvc.job.preemption import EXIT_CODE, Preemption


def _sigterm_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.01)  # Python runs the handler in the main thread at its next instruction


def test_sigterm_requests_a_stop_and_the_grace_period_runs_from_the_first() -> None:
    expired = threading.Event()
    before = signal.getsignal(signal.SIGTERM)
    preemption = Preemption(0.2, expired.set)
    preemption.install()
    try:
        assert not preemption.requested
        _sigterm_self()
        assert preemption.requested
        first = preemption.requested_at
        _sigterm_self()  # a second SIGTERM changes nothing
        assert preemption.requested_at == first
        assert expired.wait(5)
    finally:
        preemption.uninstall()
    assert signal.getsignal(signal.SIGTERM) is before
    assert EXIT_CODE == 143


def test_a_job_that_stops_in_time_is_not_ended_by_the_grace_timer() -> None:
    expired = threading.Event()
    preemption = Preemption(0.3, expired.set)
    preemption.install()
    try:
        _sigterm_self()
    finally:
        preemption.uninstall()  # the job's end: checkpoint written, actors stopped
    assert not expired.wait(0.6)


def test_install_outside_the_main_thread_leaves_the_handler_alone() -> None:
    before = signal.getsignal(signal.SIGTERM)
    preemption = Preemption(1.0, lambda: None)
    worker = threading.Thread(target=preemption.install)
    worker.start()
    worker.join()
    assert signal.getsignal(signal.SIGTERM) is before
    preemption.uninstall()
    assert signal.getsignal(signal.SIGTERM) is before
