"""Shared fixtures. Tiers are markers: unit (default), integration, e2e (see pyproject.toml)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not any(item.iter_markers(name=m) for m in ("integration", "e2e")):
            item.add_marker(pytest.mark.unit)


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray cluster started by this test session and stopped by it (ray.shutdown stops
    exactly the processes it started)."""
    import ray

    from rlsvc.cluster.ray_setup import WORKER_ENV

    ray.init(
        num_cpus=8,
        resources={"rlsvc_gpu_node": 1.0, "rlsvc_cpu_node": 1.0},
        include_dashboard=False,
        runtime_env={"env_vars": {**WORKER_ENV, "RAY_AUTH_MODE": "disabled"}},
    )
    yield ray
    ray.shutdown()


@pytest.fixture
def python() -> str:
    return sys.executable
