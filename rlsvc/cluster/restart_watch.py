"""The restarts Ray makes underneath a job, reported to its fault budgets (rlsvc/job/faults.py).

Env, reward and buffer actors are restarted by Ray without a lifetime limit (cluster/placement.py),
and the reward and buffer actors' calls are repeated on the new process, so the driver never sees
these deaths as errors. A thread reads each actor's restart count from Ray's state API every
`poll_s` seconds and reports every new restart (`report(kind, actor, error)`); when the report
raises (a budget ran out: an actor that dies at every start, whose calls would be retried for
ever) it kills that actor for good, so the call the job waits on fails and the job stops with the
budget's message.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

import ray

from rlsvc.cluster.placement import actor_name

log = logging.getLogger(__name__)


def watched_actors(svc: Any) -> dict[str, tuple[str, str, Any]]:
    """Actor id (hex) -> (budget kind, name, handle) of the actors Ray restarts."""
    named = [("env", actor_name("env", i, len(svc.envs)), a) for i, a in enumerate(svc.envs)]
    named += [("reward", actor_name("reward", 0, 1), svc.reward), ("buffer", actor_name("buffer", 0, 1), svc.buffer)]
    return {a._actor_id.hex(): (kind, name, a) for kind, name, a in named}


def death_message(actor: Any) -> str:
    """Why Ray last restarted an actor, as its state API tells it (empty when it does not)."""
    cause = getattr(actor, "death_cause", None) or {}
    context = cause.get("actor_died_error_context") or cause.get("creation_task_failure_context") or {}
    return str(context.get("error_message") or context.get("reason") or "")


class RestartWatch:
    """A context manager: the watching thread runs inside the `with` block."""

    def __init__(self, svc: Any, report: Callable[[str, str, str], object], poll_s: float = 2.0) -> None:
        self.svc, self.report, self.poll_s = svc, report, poll_s
        self.stopped: BaseException | None = None
        """What `report` raised (the budget's stop), after which the watch ends."""
        self.seen: dict[str, int] = {}  # restarts already counted, per actor id (from 0: start-up's count too)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rlsvc-restart-watch", daemon=True)

    def __enter__(self) -> RestartWatch:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s) and self.stopped is None:
            try:
                states = self.actor_states()
            except Exception as err:  # noqa: BLE001 - the state API briefly away: the next poll counts what this missed
                log.warning("restart watch: Ray's state API did not answer (%s)", err)
                continue
            self.count(states)

    def actor_states(self) -> list[Any]:
        from ray.util.state import list_actors

        # this job's cluster by its address: left to find it, the state API gives up wherever
        # another Ray instance runs on the machine ("Found multiple active Ray instances")
        context = ray.get_runtime_context()
        filters = [("job_id", "=", context.get_job_id())]
        return list_actors(context.gcs_address, filters, limit=10_000, timeout=10, detail=True, raise_on_missing_output=False)

    def count(self, states: list[Any]) -> None:
        """Report the restarts since the last poll; a report that raises kills its actor for good."""
        actors = watched_actors(self.svc)
        for state in states:
            if state.actor_id not in actors:
                continue
            kind, name, handle = actors[state.actor_id]
            restarts = state.num_restarts or 0
            new, self.seen[state.actor_id] = restarts - self.seen.get(state.actor_id, 0), restarts
            for _ in range(max(new, 0)):
                try:
                    self.report(kind, name, death_message(state) or f"died; Ray restarted it ({restarts} restarts)")
                except Exception as stop:  # noqa: BLE001 - the budget's stop, raised to the job by its own check
                    log.error("%s", stop)
                    self.stopped = stop
                    ray.kill(handle, no_restart=True)  # the call the job waits on fails now, instead of being retried for ever
                    return
            if new > 0:
                log.warning("%s died and was restarted by Ray (%d restarts)", name, restarts)
