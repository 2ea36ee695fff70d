"""The Ray errors the driver reacts to, named here so that code outside rlsvc/cluster/ catches
them without importing Ray."""

from __future__ import annotations

import ray

ActorDied = ray.exceptions.RayError
"""A call failed because an actor died (a crash, a lost node) or was unreachable; it may also be
a surviving trainer rank's error, whose collective lost its peer. The job's recovery
(rlsvc/job/recovery.py) decides what to restart."""
