"""What a job does when a policy actor dies: restart the trainer group (a dead rank leaves the
survivors in a collective that never finishes) and the reference, replace dead rollout workers,
load everything from the newest complete checkpoint, and sync the weights; again if another
actor dies meanwhile, within `faults.max_policy_restarts`.

Env, reward and buffer actors are restarted by Ray underneath (rlsvc/cluster/placement.py); a
rollout worker that dies during a batch is replaced without a rewind (GRPOLoop.collect_replacing).
Every actor call goes through the group objects of rlsvc/cluster/, so the decisions here are
unit-tested with fakes (tests/unit/test_recovery.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlsvc.checkpoint import latest_checkpoint
from rlsvc.interfaces import ActorDied
from rlsvc.training_checkpoint import Best
from rlsvc.training_checkpoint import restore as restore_checkpoint


class TooManyRestarts(RuntimeError):
    pass


def recover_with_retries(
    loop: Any, checkpoints: Path | str, setup_trainers: Callable[[], Any], limit: int, restarts: int, report: Callable[[str], None] = print
) -> tuple[int, int, Best | None]:
    """`recover`, again if an actor dies during it, within `limit` restarts in all. Returns
    (restarts so far, the checkpoint's step, its best policy)."""
    while True:
        restarts += 1
        if restarts > limit:
            raise TooManyRestarts(f"policy actors died {restarts} times (faults.max_policy_restarts={limit})")
        try:
            return (restarts, *recover(loop, checkpoints, setup_trainers))
        except ActorDied as again:
            report(f"recovery interrupted ({type(again).__name__}); again")


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
