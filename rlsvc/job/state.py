"""What a job's phases hand one another: `JobRun` (opened: the run folder and everything that must
be closed at the end, filled in as start-up creates it), `Live` (started: the actors, the loop and
where training stands) and `Trained` (what the steps left for the end)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Console

from rlsvc.checkpoint import ResumePoint
from rlsvc.config import Config
from rlsvc.job.faults import FaultBudgets
from rlsvc.job.preemption import Preemption
from rlsvc.job.training_checkpoint import Best
from rlsvc.run_folder import RunFolder
from rlsvc.task import Task

if TYPE_CHECKING:
    from rlsvc.cluster.ray_setup import Connection
    from rlsvc.cluster.services import Services
    from rlsvc.loop import GRPOLoop
    from rlsvc.models.spec import ModelSpec
    from rlsvc.policy_io import TaskCodec
    from rlsvc.tracking.mlflow_tracker import MlflowTracker


@dataclass
class JobRun:
    """An opened job: its settings, run folder and console, and what `close` must end (the MLflow
    run, the actors, the cluster connection), each set as soon as it exists."""

    cfg: Config
    task: Task
    started: float
    """time.time() when the process started (the job's clock)."""
    resume: ResumePoint | None
    folder: RunFolder
    console: Console
    preemption: Preemption
    tracker: MlflowTracker | None = None
    conn: Connection | None = None
    svc: Services | None = None
    stopping: Future | None = None
    """The actors' stop, begun once the final policy is saved."""
    status: str = "FAILED"
    """How the MLflow run ends."""

    @property
    def experiment(self) -> str:
        return self.cfg.tracking.experiment or self.cfg.run.name


@dataclass
class TrainingStart:
    """Where training stands: the next step to run and the best validated policy so far."""

    start_step: int = 0
    best: Best | None = None


@dataclass
class Live:
    """A started job: its actors and loop, ready for the steps."""

    job: JobRun
    tracker: MlflowTracker
    conn: Connection
    svc: Services
    loop: GRPOLoop
    model: ModelSpec
    codec: TaskCodec
    at: TrainingStart
    budgets: FaultBudgets
    startup_s: float
    clock: float
    """The time the run started, counting the time it had before a resume (the time budget
    and `time/since_start_s` use it)."""

    @property
    def cfg(self) -> Config:
        return self.job.cfg

    @property
    def console(self) -> Console:
        return self.job.console

    @property
    def folder(self) -> RunFolder:
        return self.job.folder


@dataclass
class Trained:
    """What the steps leave: the last step's metrics and episodes, the best validated policy,
    the training's wall time and the policy version it began at."""

    last: dict[str, float] = field(default_factory=dict)
    episodes: list[Any] = field(default_factory=list)
    best: Best | None = None
    train_s: float = 0.0
    first_version: int = 0
