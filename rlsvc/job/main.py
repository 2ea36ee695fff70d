"""`run`: one training job, in its four phases (the package's docstring names their modules)."""

from __future__ import annotations

import time

from rlsvc.checkpoint import ResumePoint
from rlsvc.config import Config
from rlsvc.job.finish import close, finish
from rlsvc.job.preemption import EXIT_CODE as PREEMPTED
from rlsvc.job.start import open_job, start
from rlsvc.job.steps import train
from rlsvc.task import Task


def run(cfg: Config, task: Task, started: float, resume: ResumePoint | None = None) -> int:
    """Open the run, start the cluster and actors, train, finish (save, evaluate, log); returns
    the exit code: 0, or `PREEMPTED` (143) when SIGTERM stopped it before `run.steps`."""
    job = open_job(cfg, task, started, resume)
    try:
        live = start(job)
        t_train = time.time()
        try:
            trained = train(live)
        finally:
            live.loop.close()
        trained.train_s = time.time() - t_train
        if job.preemption.requested and live.loop.version < cfg.run.steps:
            live.tracker.set_tags({"rlsvc.preempted_after_step": str(live.loop.version)})
            job.status = "KILLED"
            return PREEMPTED
        finish(live, trained)
        job.status = "FINISHED"
        return 0
    finally:
        close(job)
