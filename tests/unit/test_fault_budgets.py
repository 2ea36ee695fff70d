"""The fault budgets (rlsvc/job/faults.py) as a plain class with a fake clock: failures counted in
a row, reset by a new completed step (not by a step redone after a rewind), a crash loop stopped
within N restarts with one line naming the actor, the optional window cap, bounded backoff."""

from __future__ import annotations

import pytest

from rlsvc.config import FaultConfig, load_config
from rlsvc.job.faults import CrashLoop, FaultBudget, FaultBudgets


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def make(**faults) -> tuple[FaultBudgets, Clock]:
    clock = Clock()
    return FaultBudgets.from_config(FaultConfig(**faults), clock=clock), clock


def test_independent_faults_with_progress_between_them_never_stop_the_job():
    budgets, clock = make(max_policy_restarts=3)
    for step in range(1, 51):  # fifty faults, each followed by a new completed step
        clock.t += 10
        budgets.failed("policy_group", "rlsvc-trainer-0", RuntimeError("preempted"))
        began = clock.t = clock.t + 1
        budgets.progress(step, began)
    assert budgets.budgets["policy_group"].total == 50 and budgets.budgets["policy_group"].consecutive == 0


def test_a_crash_loop_stops_within_n_restarts_and_the_message_names_actor_failures_and_error():
    budgets, clock = make(max_actor_restarts=5)
    for _ in range(5):
        clock.t += 1
        budgets.failed("reward", "rlsvc-reward", "died; Ray restarted it")
    with pytest.raises(CrashLoop) as stop:
        budgets.failed("reward", "rlsvc-reward", "OOM killed\nsecond line of a traceback")
    message = str(stop.value)
    assert "\n" not in message
    assert message == (
        "rlsvc-reward (reward) failed 6 times in a row without a new completed step (faults.max_actor_restarts=5); last error: OOM killed"
    )
    assert budgets.stopped is stop.value  # another thread's check raises it too
    with pytest.raises(CrashLoop):
        budgets.check()


def test_only_a_step_past_the_furthest_one_resets_the_count():
    budgets, clock = make(max_policy_restarts=2)
    budgets.progress(10, began_at=0.0)  # the job had completed 10 steps
    clock.t = 5.0
    budgets.failed("policy_group", "rlsvc-trainer-0", "died")
    budgets.progress(8, began_at=6.0)  # steps redone after the rewind to step 7: not progress
    budgets.progress(10, began_at=7.0)
    assert budgets.budgets["policy_group"].consecutive == 1
    budgets.progress(11, began_at=8.0)  # new ground
    assert budgets.budgets["policy_group"].consecutive == 0


def test_a_step_that_began_before_the_failure_does_not_reset_it():
    """A Ray-restarted actor is counted when the watch sees it, maybe mid-step: only a step begun
    after that shows the restarted actor working."""
    budgets, clock = make()
    clock.t = 3.0
    budgets.failed("env", "rlsvc-env-0", "died")
    budgets.progress(1, began_at=2.0)
    assert budgets.budgets["env"].consecutive == 1
    budgets.progress(2, began_at=4.0)
    assert budgets.budgets["env"].consecutive == 0


def test_kinds_are_counted_apart():
    budgets, _ = make(max_policy_restarts=1, max_actor_restarts=1)
    budgets.failed("env", "rlsvc-env-0", "died")
    budgets.failed("policy_group", "rlsvc-reference", "died")
    budgets.failed("rollout_worker", "rlsvc-rollout-0", "died")
    with pytest.raises(CrashLoop, match=r"rlsvc-env-1 \(env\) failed 2 times"):
        budgets.failed("env", "rlsvc-env-1", "died")


def test_the_window_cap_stops_many_failures_even_with_progress_between_them():
    budgets, clock = make(max_restarts_per_window=3, restart_window_s=3600)
    for step in range(1, 4):
        clock.t += 600
        budgets.failed("buffer", "rlsvc-buffer", "died")
        budgets.progress(step, began_at=clock.t + 1)
    clock.t += 600
    with pytest.raises(CrashLoop, match=r"failed 4 times within 3600 s \(faults.max_restarts_per_window=3\)"):
        budgets.failed("buffer", "rlsvc-buffer", "died")


def test_the_window_forgets_failures_older_than_it():
    budgets, clock = make(max_restarts_per_window=2, restart_window_s=100)
    for step in range(1, 6):
        clock.t += 60  # one failure a minute: never more than two within 100 s
        budgets.failed("buffer", "rlsvc-buffer", "died")
        budgets.progress(step, began_at=clock.t + 1)
    assert budgets.budgets["buffer"].total == 5


def test_backoff_is_none_then_doubles_and_is_bounded():
    budget = FaultBudget("policy_group", "faults.max_policy_restarts", limit=10, backoff_s=1.0, backoff_max_s=5.0)
    waits = [budget.failed("rlsvc-trainer-0", "died", now=float(i)) for i in range(7)]
    assert waits == [0.0, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]


def test_metrics_report_restarts_per_kind_consecutive_counts_and_recovery_cost():
    budgets, clock = make()
    budgets.failed("policy_group", "rlsvc-trainer-0", "died")
    budgets.rewound(from_steps=13, to_step=10, seconds=4.5)
    m = budgets.metrics()
    assert m["faults/restarts/policy_group"] == m["faults/consecutive/policy_group"] == m["faults/policy_restarts"] == 1.0
    assert m["faults/steps_redone"] == 3.0 and m["faults/recovery_s"] == 4.5
    assert m["faults/restarts/env"] == 0.0
    assert budgets.changed() == m and budgets.changed() == {}  # logged again only once they move


def test_the_defaults_are_consecutive_budgets_with_no_window_cap():
    faults = load_config(None, []).faults
    assert (faults.max_policy_restarts, faults.max_actor_restarts, faults.max_restarts_per_window) == (3, 5, 0)
    assert faults.crash_on_start is None
