"""A BlackJack task whose final evaluation first waits, bounded, for the job's actors to be gone,
then for the local cluster the job started to be shut down (tests/e2e/test_job_end.py): selected
by import path, `env.task=stop_probe:make`."""

from __future__ import annotations

import time
from pathlib import Path

from rlsvc.tasks.blackjack import BlackjackTask

WAIT_S = 90.0


def live_actor_names() -> list[str]:
    """The job's named actors (rlsvc-rollout-0, ...) Ray still lists as alive; none once the job
    has shut its local cluster down (after stopping them)."""
    import ray

    if not ray.is_initialized():
        return []
    try:
        names = ray.util.list_named_actors()
    except Exception:
        if ray.is_initialized():
            raise
        return []  # the shutdown began during the call
    return sorted(n for n in names if n.startswith("rlsvc-"))


class StopProbeTask(BlackjackTask):
    seen_in_training = 0
    """How many of the job's actors the last validation (in training, in the driver) saw."""

    def validate(self, choose, episodes: int, seed: int) -> float:
        self.seen_in_training = len(live_actor_names())
        return super().validate(choose, episodes, seed)

    def evaluate(self, checkpoint: Path, episodes: int, seed: int) -> dict[str, float]:
        import ray

        deadline = time.monotonic() + WAIT_S
        while (left := live_actor_names()) and time.monotonic() < deadline:
            time.sleep(0.2)
        while ray.is_initialized() and time.monotonic() < deadline:  # the local cluster, after them
            time.sleep(0.2)
        return {
            **super().evaluate(checkpoint, episodes, seed),
            "probe_actors_in_training": float(self.seen_in_training),
            "probe_actors_left": float(len(left)),
            "probe_cluster_up": float(ray.is_initialized()),
        }


def make() -> StopProbeTask:
    return StopProbeTask()
