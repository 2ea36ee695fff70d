"""The job's recovery decisions (rlsvc/recovery.py) with in-process fakes, no Ray cluster: after
a policy actor died, the whole trainer group and the dead rollout workers are replaced, the newest
complete checkpoint is loaded into them and the loop, the engines are rewound to its weights and
synced; an actor dying during recovery starts it again, within the restart budget."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from rlsvc.interfaces import ActorDied
from rlsvc.recovery import TooManyRestarts, recover, recover_with_retries
from rlsvc.training_checkpoint import save


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


def test_an_actor_dying_during_recovery_starts_it_again_within_the_budget(tmp_path):
    loop, log = checkpointed_loop(tmp_path, dead_rollout=[])
    attempts = []

    def setup() -> dict:
        attempts.append(1)
        if len(attempts) == 1:
            raise ActorDied("rank 0 died while loading")
        return "spec"

    said: list[str] = []
    restarts, step, best = recover_with_retries(loop, tmp_path, setup, limit=3, restarts=0, report=said.append)
    assert (restarts, step, best) == (2, 7, None) and len(attempts) == 2
    assert said == ["recovery interrupted (ActorDied); again"]
    assert [c for c in log if c[0] == "restart_policy_group"] == [("restart_policy_group",)] * 2


def test_the_restart_budget_is_a_hard_limit(tmp_path):
    loop, _ = checkpointed_loop(tmp_path, dead_rollout=[])

    def always_dies() -> dict:
        raise ActorDied("dies again")

    with pytest.raises(TooManyRestarts, match=r"policy actors died 3 times \(faults.max_policy_restarts=2\)"):
        recover_with_retries(loop, tmp_path, always_dies, limit=2, restarts=0, report=lambda _: None)
    with pytest.raises(TooManyRestarts):
        recover_with_retries(loop, tmp_path, lambda: {}, limit=2, restarts=2)  # the budget was spent before
