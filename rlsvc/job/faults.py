"""Fault budgets: tell a crash loop from independent faults (docs/faults.md, "Fault budgets").

A budget counts the failures of one kind of actor (the policy group, a rollout worker, an env,
reward or buffer actor) *in a row without progress*, not over the job's life: a days-long job's
tenth independent fault costs a restart, while an actor that dies again right after it was
restarted (a bad node, an out-of-memory that recurs, a poisoned checkpoint) stops the job after
`limit` restarts. Progress is a training step completed that the job had not completed before
(past its high-water mark), begun after the kind's last failure: a step redone after a rewind to
a checkpoint is not progress, so a job that fails faster than it checkpoints cannot loop forever
either. Optionally, at most `window_limit` failures of a kind within `window_s` seconds, progress
or not. Between consecutive restarts of a kind the job waits, doubling from `backoff_s` up to
`backoff_max_s` (the first restart is immediate), as Kubernetes does for a crash-looping pod.

Plain Python, no Ray: the job feeds it (rlsvc/job/steps.py, rlsvc/cluster/restart_watch.py) and
tests drive it with a fake clock (tests/unit/test_fault_budgets.py).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from rlsvc.config import FaultConfig

# kind -> the setting whose value is its consecutive-failure limit
KINDS = {
    "policy_group": "faults.max_policy_restarts",
    "rollout_worker": "faults.max_policy_restarts",
    "env": "faults.max_actor_restarts",
    "reward": "faults.max_actor_restarts",
    "buffer": "faults.max_actor_restarts",
}


class CrashLoop(RuntimeError):
    """One kind of actor failed more often than its budget allows: the job stops."""


def one_line(error: BaseException | str, width: int = 200) -> str:
    """An error as one short line: its type and the first line of its message."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    first = text.strip().splitlines()[0] if text.strip() else text
    return first if len(first) <= width else first[: width - 3] + "..."


@dataclass
class FaultBudget:
    """The failures of one kind of actor: consecutive ones (reset by progress), all of them, and
    the times of those within the optional window."""

    kind: str
    setting: str
    limit: int
    """Restarts in a row allowed; the failure after them stops the job."""
    window_s: float = 3600.0
    window_limit: int = 0
    """At most this many failures within `window_s` (0: no cap)."""
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0
    consecutive: int = 0
    total: int = 0
    last_failure_at: float = float("-inf")
    times: deque[float] = field(default_factory=deque)

    def failed(self, actor: str, error: BaseException | str, now: float) -> float:
        """Count one failure of `actor`; raise `CrashLoop` (one line: the actor, the failures,
        the setting, the last error) past the budget, else return the seconds to wait before
        restarting it."""
        self.consecutive += 1
        self.total += 1
        self.last_failure_at = now
        self.times.append(now)
        while self.times and self.times[0] <= now - self.window_s:
            self.times.popleft()
        if self.consecutive > self.limit:
            raise CrashLoop(
                f"{actor} ({self.kind}) failed {self.consecutive} times in a row without a new completed step "
                f"({self.setting}={self.limit}); last error: {one_line(error)}"
            )
        if self.window_limit and len(self.times) > self.window_limit:
            raise CrashLoop(
                f"{actor} ({self.kind}) failed {len(self.times)} times within {self.window_s:g} s "
                f"(faults.max_restarts_per_window={self.window_limit}); last error: {one_line(error)}"
            )
        return self.backoff()

    def backoff(self) -> float:
        """Seconds before the next restart: none for the first of a run of failures, then
        `backoff_s` doubling per consecutive failure, at most `backoff_max_s`."""
        if self.consecutive <= 1:
            return 0.0
        return float(min(self.backoff_s * 2 ** (self.consecutive - 2), self.backoff_max_s))


@dataclass
class FaultBudgets:
    """Every kind's budget, the job's high-water mark, and the recovery's cost (steps redone,
    seconds spent restarting and waiting): what the job logs under `faults/`."""

    budgets: dict[str, FaultBudget]
    clock: Callable[[], float] = time.monotonic
    furthest_step: int = 0
    steps_redone: int = 0
    recovery_s: float = 0.0
    stopped: CrashLoop | None = None
    """Set when a budget ran out on another thread (the restart watch): the job raises it."""
    _logged: dict[str, float] = field(default_factory=dict, repr=False)

    @classmethod
    def from_config(cls, faults: FaultConfig, clock: Callable[[], float] = time.monotonic, start_step: int = 0) -> FaultBudgets:
        """The budgets of the config's `faults` section."""
        limits = {"faults.max_policy_restarts": faults.max_policy_restarts, "faults.max_actor_restarts": faults.max_actor_restarts}
        budgets = {
            kind: FaultBudget(
                kind,
                setting,
                limits[setting],
                faults.restart_window_s,
                faults.max_restarts_per_window,
                faults.restart_backoff_s,
                faults.restart_backoff_max_s,
            )
            for kind, setting in KINDS.items()
        }
        return cls(budgets, clock, furthest_step=start_step)

    def failed(self, kind: str, actor: str, error: BaseException | str) -> float:
        """Count a failure of `actor` (of `kind`); returns the backoff in seconds. A budget run
        out is remembered in `stopped` as well as raised, for the thread that did not see it."""
        try:
            return self.budgets[kind].failed(actor, error, self.clock())
        except CrashLoop as stop:
            self.stopped = self.stopped or stop
            raise

    def progress(self, steps_done: int, began_at: float) -> None:
        """A step ended with `steps_done` steps completed; it began at `began_at` (this clock).
        Past the high-water mark, it resets every kind whose last failure came before it began."""
        if steps_done <= self.furthest_step:
            return
        self.furthest_step = steps_done
        for budget in self.budgets.values():
            if budget.last_failure_at < began_at:
                budget.consecutive = 0

    def rewound(self, from_steps: int, to_step: int, seconds: float) -> None:
        """A recovery rewound the job from `from_steps` completed (the step in flight counted) to
        a checkpoint's `to_step`, and took `seconds` (restart, load, backoff)."""
        self.steps_redone += max(from_steps - to_step, 0)
        self.recovery_s += seconds

    def metrics(self) -> dict[str, float]:
        """`faults/restarts/<kind>`, `faults/consecutive/<kind>`, `faults/steps_redone`,
        `faults/recovery_s`, and `faults/policy_restarts` (the policy group's, as before)."""
        out: dict[str, float] = {"faults/steps_redone": float(self.steps_redone), "faults/recovery_s": self.recovery_s}
        for kind, budget in self.budgets.items():
            out[f"faults/restarts/{kind}"] = float(budget.total)
            out[f"faults/consecutive/{kind}"] = float(budget.consecutive)
        out["faults/policy_restarts"] = float(self.budgets["policy_group"].total)
        return out

    def changed(self) -> dict[str, float]:
        """`metrics()` when they differ from the last ones this returned (and the first time),
        else nothing: a job logs them to MLflow when a fault or a reset moved them."""
        now = self.metrics()
        if now == self._logged:
            return {}
        self._logged = now
        return now

    def check(self) -> None:
        """Raise the budget another thread found spent."""
        if self.stopped is not None:
            raise self.stopped
