"""The job's recovery decisions (rlsvc/job/recovery.py) with in-process fakes, no Ray cluster: after
a policy actor died, the whole trainer group and the dead rollout workers are replaced, the newest
complete checkpoint is loaded into them and the loop, the engines are rewound to its weights and
synced; an actor dying during recovery starts it again, each failure counted by the fault budget
(rlsvc/job/faults.py), which waits between restarts in a row and stops a crash loop."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from rlsvc.config import FaultConfig
from rlsvc.interfaces import ActorDied
from rlsvc.job.faults import CrashLoop, FaultBudgets
from rlsvc.job.recovery import failed_kind, recover, recover_with_retries
from rlsvc.job.training_checkpoint import save


class FakeTrainers:
    def __init__(self, log: list) -> None:
        self.log = log

    def save_checkpoint(self, directory: str) -> None:
        Path(directory).mkdir(parents=True)
        (Path(directory) / "shard.bin").write_bytes(b"weights")

    def load_checkpoint(self, directory: str) -> None:
        assert (Path(directory) / "shard.bin").read_bytes() == b"weights"
        self.log.append(("load_checkpoint",))


class FakeServices:
    def __init__(self, dead_rollout: list[int], log: list) -> None:
        self.log, self.dead = log, dead_rollout
        self.trainer_group = FakeTrainers(log)
        self.reference_model = None
        self.buffer_client = SimpleNamespace(
            snapshot=lambda: {"items": [], "dropped_full": 0}, restore=lambda snap: log.append(("restore_buffer",))
        )

    def restart_policy_group(self) -> None:
        self.log.append(("restart_policy_group",))

    def dead_rollout_workers(self) -> list[int]:
        return list(self.dead)

    def replace_rollout(self, i: int) -> None:
        self.log.append(("replace_rollout", i))

    def rewind_rollout(self, version: int) -> None:
        self.log.append(("rewind_rollout", version))


class FakeLoop:
    def __init__(self, svc: FakeServices, log: list) -> None:
        self.svc, self.log = svc, log
        self.version, self.nonfinite_skipped = 0, 0
        self.sync = SimpleNamespace(close=lambda timeout_s: log.append(("close_sync",)))

    def state_dict(self) -> dict[str, int]:
        return {"version": self.version, "nonfinite_skipped": self.nonfinite_skipped}

    def load_state_dict(self, state: dict) -> None:
        self.version, self.nonfinite_skipped = state["version"], state["nonfinite_skipped"]

    def close(self) -> None:  # the asynchronous loop stops its producer here
        self.log.append(("close_loop",))

    def new_sync(self):
        self.log.append(("new_sync",))
        return SimpleNamespace(close=lambda timeout_s: None)

    def sync_weights(self) -> dict:
        self.log.append(("sync_weights", self.version))
        return {}


def checkpointed_loop(tmp_path: Path, dead_rollout: list[int]) -> tuple[FakeLoop, list]:
    log: list = []
    loop = FakeLoop(FakeServices(dead_rollout, log), log)
    loop.version, loop.nonfinite_skipped = 7, 1
    save(tmp_path, 7, loop, None, {"mlflow_run_id": "r", "tracking_uri": "u", "elapsed_s": 1.0, "config_hash": "h"}, keep=2)
    loop.version, loop.nonfinite_skipped = 9, 2  # two more steps, lost with the dead actor
    return loop, log


def test_recovery_replaces_the_group_and_dead_workers_then_loads_the_checkpoint(tmp_path):
    loop, log = checkpointed_loop(tmp_path, dead_rollout=[1])
    setups: list[int] = []
    step, best = recover(loop, tmp_path, lambda: setups.append(1) or "spec")
    assert (step, best) == (7, None) and setups == [1]
    assert (loop.version, loop.nonfinite_skipped) == (7, 1)
    assert log == [
        ("close_loop",),
        ("close_sync",),
        ("restart_policy_group",),
        ("replace_rollout", 1),
        ("load_checkpoint",),
        ("restore_buffer",),
        ("rewind_rollout", 7),
        ("new_sync",),
        ("sync_weights", 7),
    ]


def budgets(**faults) -> FaultBudgets:
    return FaultBudgets.from_config(FaultConfig(**faults), clock=lambda: 0.0)


def test_an_actor_dying_during_recovery_starts_it_again_after_its_backoff(tmp_path):
    loop, log = checkpointed_loop(tmp_path, dead_rollout=[])
    attempts = []

    def setup() -> dict:
        attempts.append(1)
        if len(attempts) == 1:
            raise ActorDied("rank 0 died while loading")
        return "spec"

    said: list[str] = []
    slept: list[float] = []
    b = budgets(restart_backoff_s=2.0)
    step, best = recover_with_retries(loop, tmp_path, setup, b, ["rlsvc-trainer-0"], ActorDied("x"), said.append, slept.append)
    assert (step, best) == (7, None) and len(attempts) == 2
    assert said[0] == "recovery interrupted (ActorDied); again"
    assert slept == [2.0]  # the first restart at once, the second in a row after the backoff
    assert b.budgets["policy_group"].consecutive == 2 and b.budgets["policy_group"].total == 2
    assert [c for c in log if c[0] == "restart_policy_group"] == [("restart_policy_group",)] * 2


def test_a_policy_group_that_dies_at_every_restart_stops_the_job_within_its_budget(tmp_path):
    loop, log = checkpointed_loop(tmp_path, dead_rollout=[])

    def always_dies() -> dict:
        raise ActorDied("dies again")

    b = budgets(max_policy_restarts=2, restart_backoff_s=0)
    with pytest.raises(
        CrashLoop,
        match=r"failed 3 times in a row without a new completed step \(faults.max_policy_restarts=2\); last error: ActorDied: dies again",
    ):
        recover_with_retries(loop, tmp_path, always_dies, b, ["rlsvc-trainer-1"], ActorDied("first"), report=lambda _: None)
    assert [c for c in log if c[0] == "restart_policy_group"] == [("restart_policy_group",)] * 2  # N restarts, then the stop


def test_dead_rollout_workers_alone_count_against_their_own_budget():
    assert failed_kind(["rlsvc-rollout-0", "rlsvc-rollout-1"]) == "rollout_worker"
    assert failed_kind(["rlsvc-rollout-0", "rlsvc-trainer-0"]) == failed_kind(["rlsvc-reference"]) == "policy_group"
