"""The metadata a job puts on its Ray job: given as a callable (the job's MLflow run is opened
while Ray starts), it is asked for once the local cluster's processes are up, and lands in the
driver's JobConfig, where `ray list jobs --detail` (the state API) shows it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration

SCRIPT = """
import json
from ray._private import worker
from ray.util.state import list_jobs
from rlsvc.cluster.ray_setup import connect
from rlsvc.config import load_config

asked = []

def metadata():
    asked.append(worker._global_node is not None)  # the local cluster already started?
    return {"rlsvc.mlflow_run_id": "run-made-while-ray-started"}

conn = connect(load_config(None, []).cluster, log_to_driver=False, metadata=metadata)
try:
    # this cluster's by its address: the test session may have a Ray cluster of its own
    [job] = [j for j in list_jobs(address=conn.dashboard_url, detail=True) if j.job_id == conn.job_id]
    print("RESULT " + json.dumps({"asked": asked, "metadata": job.metadata}))
finally:
    conn.shutdown()
"""


def test_metadata_made_while_ray_starts_is_on_the_drivers_job():
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT ")).removeprefix("RESULT "))
    assert out["asked"] == [True]  # once, with the cluster up
    assert out["metadata"]["rlsvc.mlflow_run_id"] == "run-made-while-ray-started"


NO_DASHBOARD = """
import json, time, psutil
from rlsvc.cluster.ray_setup import connect
from rlsvc.config import load_config

conn = connect(load_config(None, ["cluster.include_dashboard=false"]).cluster, log_to_driver=False)
try:
    time.sleep(3)  # time enough for a dashboard's modules to start
    started = [" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)]
    print("RESULT " + json.dumps({"url": conn.dashboard_url, "processes": started}))
finally:
    conn.shutdown()
"""


def test_a_local_cluster_without_the_dashboard_starts_none_of_its_modules():
    """`cluster.include_dashboard=false` (the benchmarks that time training only): Ray still runs
    its dashboard process headless (the state API and job server), without the web dashboard's
    modules, each a process of its own, and does not wait for them."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([sys.executable, "-c", NO_DASHBOARD], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT ")).removeprefix("RESULT "))
    assert out["url"] is None
    assert any("gcs_server" in p for p in out["processes"]), out["processes"]  # the cluster is up
    assert not any(p.startswith("ray-dashboard-") for p in out["processes"]), out["processes"]
