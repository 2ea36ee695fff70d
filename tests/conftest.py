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


@pytest.fixture(scope="session")
def run_notebook():
    """`run_notebook(name, env)` -> (all output text, number of PNGs shown): see execute_notebook."""
    return lambda name, env, timeout_s=900: notebook_outputs(execute_notebook(name, env, timeout_s))


def execute_notebook(name: str, env: dict[str, str], timeout_s: int = 900):
    """Run notebooks/NAME top to bottom in a fresh kernel (nbclient), with `env` added to the
    kernel's environment; any cell that raises fails the test. Returns the executed notebook."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(REPO / "notebooks" / name, as_version=4)
    client = NotebookClient(nb, timeout=timeout_s, kernel_name="python3", resources={"metadata": {"path": str(REPO / "notebooks")}})
    client.execute(env={**os.environ, **env})
    return nb


def notebook_outputs(nb) -> tuple[str, int]:
    """All text a notebook's cells output (streams, results, HTML), and how many PNGs they show."""
    texts, pngs = [], 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            texts.append(out.get("text", ""))
            data = out.get("data", {})
            texts += [data.get("text/plain", ""), data.get("text/html", "")]
            pngs += "image/png" in data
    return "\n".join(t if isinstance(t, str) else "".join(t) for t in texts), pngs
