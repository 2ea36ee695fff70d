"""Ray only under rlsvc/cluster/, at import time too: the loops, the recovery, the task interface
and the task registry load no Ray, so their users (and their unit tests) never start it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlsvc.interfaces import ActorDied

RAY_FREE = [
    "rlsvc.interfaces",
    "rlsvc.episode",
    "rlsvc.loop",
    "rlsvc.async_loop",
    "rlsvc.job.recovery",
    "rlsvc.job.faults",
    "rlsvc.task",
    "rlsvc.tasks.registry",
]

PROBE = """
import json, sys
pulled = {}
for name in MODULES:
    __import__(name)
    pulled[name] = sorted(m for m in sys.modules if m == "ray" or m.startswith("ray."))[:3]
print(json.dumps(pulled))
"""


def test_the_loops_recovery_and_tasks_import_without_ray():
    code = f"MODULES = {RAY_FREE!r}\n{PROBE}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=180)
    pulled = json.loads(out.stdout.strip().splitlines()[-1])
    assert {name: mods for name, mods in pulled.items() if mods} == {}, "these modules load Ray"


def test_the_cluster_layer_raises_ray_failures_as_actor_died():
    """What `except ActorDied` caught when it was Ray's `RayError`: an actor's death, an
    unavailable actor, a surviving rank's own error; Ray's error stays the cause."""
    ray = pytest.importorskip("ray")  # the exception classes only: no cluster starts
    from rlsvc.cluster.errors import translated

    for err in (
        ray.exceptions.ActorDiedError(),
        ray.exceptions.ActorUnavailableError("restarting", b"x" * 16),
        ray.exceptions.RayTaskError("train_step", "Traceback: gloo connection closed", RuntimeError("gloo")),
        ray.exceptions.GetTimeoutError("timed out"),
    ):

        @translated
        def call(err: Exception = err) -> None:
            raise err

        with pytest.raises(ActorDied) as caught:
            call()
        assert caught.value.__cause__ is err and str(caught.value).startswith(type(err).__name__)


def test_other_errors_pass_through_the_cluster_layer_unchanged():
    pytest.importorskip("ray")
    from rlsvc.cluster.errors import translated

    @translated
    def call() -> None:
        raise ValueError("weight_sync.type=shm needs one node")

    with pytest.raises(ValueError, match="needs one node"):
        call()
