"""One training job, in four phases, each a module:

- open and start (`rlsvc/job/start.py`): the run folder and SIGTERM handling; Ray, with the MLflow
  run and the initial model prepared meanwhile; placement, the actors, the heap freeze, the warm
  start or the resume, the first weight sync;
- steps (`rlsvc/job/steps.py`): the GRPO steps with validation, checkpoints, recovery from dead
  actors (`rlsvc/job/recovery.py`, within the fault budgets of `rlsvc/job/faults.py`) and the
  stop check (time budget, preemption: `rlsvc/job/preemption.py`);
- finish (`rlsvc/job/finish.py`): the final policy saved and evaluated, artifacts, the MLflow
  model, result.json, and the clean-up every job ends with.

`run` (`rlsvc/job/main.py`) reads them in that order; `JobRun`, `Live` and `Trained`
(`rlsvc/job/state.py`) carry what one phase hands the next. What a training checkpoint holds is
`rlsvc/job/training_checkpoint.py`.

The names below are loaded on first use, so that the Ray-free parts (faults, recovery,
preemption, the training checkpoint) import without Ray.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "run": "rlsvc.job.main",
    "prepare_model": "rlsvc.job.model",
    "setup_trainers": "rlsvc.job.model",
    "policy_meta": "rlsvc.job.model",
    "start_actors": "rlsvc.job.start",
}


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'rlsvc.job' has no attribute {name!r}")
