"""A job given no cluster address starts a local cluster of its own (rlsvc/cluster/ray_setup.py
`connect`), and asks Ray for exactly that: with no address, Ray joins the machine's current
`ray start` cluster where there is one (/tmp/ray/ray_current_cluster) and then refuses the job's
num_cpus ("When connecting to an existing cluster, num_cpus and num_gpus must not be provided"),
which failed two jobs of one CI run started while another test's cluster was current."""

from __future__ import annotations

import os

import pytest
import ray

from rlsvc.cluster import ray_setup
from rlsvc.config import ClusterConfig


class Started(Exception):
    """Raised by the stand-in ray.init once it has seen its arguments."""


def test_a_job_without_an_address_starts_a_cluster_of_its_own(monkeypatch):
    asked: list[dict] = []

    def init(**kwargs):
        asked.append(kwargs)
        raise Started

    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"})
    monkeypatch.setattr(ray, "init", init)
    with pytest.raises(Started):
        ray_setup.connect(ClusterConfig())
    assert asked[0]["address"] == "local" and asked[0]["num_cpus"] >= 8


def test_a_local_cluster_gives_its_dashboard_minutes_to_start_unless_the_user_says(monkeypatch):
    from ray._private import ray_constants

    def init(**kwargs):
        raise Started

    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_DASHBOARD_STARTUP_TIMEOUT_S")})
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray_constants, "RAY_DASHBOARD_STARTUP_TIMEOUT_S", 60)  # Ray's default
    with pytest.raises(Started):
        ray_setup.connect(ClusterConfig())
    assert ray_constants.RAY_DASHBOARD_STARTUP_TIMEOUT_S == ray_setup.DASHBOARD_STARTUP_TIMEOUT_S == 300

    monkeypatch.setattr(ray_constants, "RAY_DASHBOARD_STARTUP_TIMEOUT_S", 45)  # as Ray read the user's variable
    os.environ["RAY_DASHBOARD_STARTUP_TIMEOUT_S"] = "45"
    with pytest.raises(Started):
        ray_setup.connect(ClusterConfig())
    assert ray_constants.RAY_DASHBOARD_STARTUP_TIMEOUT_S == 45
