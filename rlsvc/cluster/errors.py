"""Ray's failures as the loop's `ActorDied` (rlsvc/interfaces.py), so that code outside
rlsvc/cluster/ catches them without importing Ray. Every call the loops and the recovery make
through the cluster layer (rlsvc/cluster/groups.py, services.py, fleet.py, weight_sync/) goes
through `get` or a `translated` method: what `except ActorDied` caught when it was Ray's
`RayError` itself, it catches now, with Ray's error as the cause."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import ray

from rlsvc.interfaces import ActorDied

P = ParamSpec("P")
R = TypeVar("R")


def actor_died(err: ray.exceptions.RayError) -> ActorDied:
    """The loop's error for a Ray failure (raise it `from err`)."""
    return ActorDied(f"{type(err).__name__}: {err}")


def get(refs: Any, timeout: float | None = None) -> Any:
    """`ray.get`, a Ray failure raised as `ActorDied`."""
    try:
        return ray.get(refs, timeout=timeout)
    except ray.exceptions.RayError as err:
        raise actor_died(err) from err


def translated(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` with every Ray failure inside it raised as `ActorDied`."""

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except ray.exceptions.RayError as err:
            raise actor_died(err) from err

    return call
