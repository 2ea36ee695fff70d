"""What a job does when a policy actor dies: restart the trainer group (a dead rank leaves the
survivors in a collective that never finishes) and the reference, replace dead rollout workers,
load everything from the newest complete checkpoint, and sync the weights; again if another
actor dies meanwhile, each failure counted by the job's fault budget (rlsvc/job/faults.py), which
stops a crash loop and makes the job wait between restarts in a row.

Env, reward and buffer actors are restarted by Ray underneath (rlsvc/cluster/placement.py), their
restarts counted by rlsvc/cluster/restart_watch.py; a rollout worker that dies during a batch of
the synchronous loop is replaced without a rewind (GRPOLoop.collect_replacing). Every actor call
goes through the group objects of rlsvc/cluster/, so the decisions here are unit-tested with
fakes (tests/unit/test_recovery.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlsvc.checkpoint import latest_checkpoint
from rlsvc.interfaces import ActorDied
from rlsvc.job.faults import FaultBudgets
from rlsvc.job.training_checkpoint import Best
from rlsvc.job.training_checkpoint import restore as restore_checkpoint


def failed_kind(dead: list[str]) -> str:
    """The budget a death counts against: rollout workers alone, or the policy group."""
    return "rollout_worker" if dead and all(name.startswith("rlsvc-rollout") for name in dead) else "policy_group"


def recover_with_retries(
    loop: Any,
    checkpoints: Path | str,
    setup_trainers: Callable[[], Any],
    budgets: FaultBudgets,
    dead: list[str],
    error: BaseException,
    report: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[int, Best | None]:
    """`recover` after `dead` actors died with `error`, again if an actor dies during it; each
    failure is counted (`CrashLoop` past the budget) and waited for by its backoff. Returns the
    checkpoint's step and its best policy."""
    kind, actor = failed_kind(dead), ", ".join(dead) or "a policy actor"
    while True:
        wait = budgets.failed(kind, actor, error)
        if wait:
            report(f"{actor} failed {budgets.budgets[kind].consecutive} times in a row: waiting {wait:.0f} s before restarting")
            sleep(wait)
        try:
            return recover(loop, checkpoints, setup_trainers)
        except ActorDied as again:
            report(f"recovery interrupted ({type(again).__name__}); again")
            kind, actor, error = "policy_group", "a policy actor (during recovery)", again


def recover(loop: Any, checkpoints: Path | str, setup_trainers: Callable[[], Any]) -> tuple[int, Best | None]:
    """New trainer ranks and reference (the whole group), new rollout workers for dead ones,
    everything loaded from the newest complete checkpoint, weights synced. `setup_trainers`
    builds the trainer on the new ranks and returns its spec (the reference is built from it). Returns
    the checkpoint's step and its best policy."""
    svc = loop.svc
    loop.close()  # the asynchronous loop's producer stops; its next step starts one from the checkpoint
    loop.sync.close(timeout_s=10)
    svc.restart_policy_group()
    for i in svc.dead_rollout_workers():
        svc.replace_rollout(i)
    folder, state, _ = latest_checkpoint(checkpoints)
    best = restore_checkpoint(folder, state, loop, setup_trainers())
    svc.rewind_rollout(state["version"])  # back to the checkpoint's weights
    loop.sync = loop.new_sync()
    loop.sync_weights()
    return state["step"], best
