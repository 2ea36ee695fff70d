"""The default BlackJack job trains against an OpenEnv server it did not start (a separate
process, as a team runs environments on their own CPU pods), by URL. The server is killed in the
middle of the run and started again on the same port: every session reconnects, at most the
groups whose episodes were in flight are dropped, and the job finishes and evaluates."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import LEAN_JOB, StartServer, stop_process

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
STEPS, KILL_AFTER = 12, 4


def logged_steps(client, uri: str, experiment: str) -> int:
    """How many steps the job's MLflow run has logged so far."""
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id]) if exp else []
    return len(client.get_metric_history(runs[0].info.run_id, "return_mean")) if runs else 0


def test_the_default_job_trains_against_a_server_that_is_killed_and_restarted(start_server: StartServer, tmp_path, mlflow_uri):
    from mlflow.tracking import MlflowClient

    server, url = start_server(256)
    port = int(url.rsplit(":", 1)[1])
    uri = mlflow_uri
    cmd = [
        sys.executable,
        "-m",
        "rlsvc.train",
        f"env.remote.url={url}",
        "env.remote.connect_timeout_s=120",
        "env.step_latency_ms=100",  # env round trips dominate the step: the kill lands while episodes are in flight
        f"run.steps={STEPS}",
        *LEAN_JOB,
        "run.time_budget_minutes=null",
        "eval.every_steps=6",
        "eval.episodes=2000",
        f"run.output_dir={tmp_path / 'runs'}",
        f"tracking.tracking_uri={uri}",
        "tracking.experiment=remote",
    ]
    # The store's tables are made already (tests/conftest.py, mlflow_template): MLflow's first open
    # of a new sqlite file migrates it, and this test's client and the job migrating one file at
    # once failed a CI run ("No such constraint: 'uq_registered_models_name'").
    client = MlflowClient(uri)
    log = (tmp_path / "job.log").open("w")
    job = subprocess.Popen(cmd, cwd=tmp_path, env={**os.environ, "RAY_AUTH_MODE": "disabled"}, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 600
        while logged_steps(client, uri, "remote") < KILL_AFTER:
            assert job.poll() is None, (tmp_path / "job.log").read_text()[-4000:]
            assert time.monotonic() < deadline, "the job did not reach the kill point"
            time.sleep(0.2)
        server.send_signal(signal.SIGKILL)  # while step KILL_AFTER + 1 runs: its resets or its episodes
        server.wait(timeout=30)
        time.sleep(1.0)
        start_server(256, port)  # a new server on the same address
        assert job.wait(timeout=900) == 0, (tmp_path / "job.log").read_text()[-4000:]
    finally:
        stop_process(job)
        log.close()

    result = json.loads(next((tmp_path / "runs").glob("*/result.json")).read_text())
    assert result["steps"] == STEPS and -1.0 <= result["eval"]["mean_return"] <= 1.0
    run_id = result["mlflow_run_id"]
    history = {name: {m.step: m.value for m in client.get_metric_history(run_id, name)} for name in ("groups_dropped", "env/reconnects")}
    dropped, reconnects = history["groups_dropped"], history["env/reconnects"]
    # Every session's connection died with the server and was opened again on the new one. Where
    # the kill lands decides the rest: episodes in flight in a step are lost with their groups
    # (one run: 32 of 64 groups at the kill's step); a kill during the resets costs only time.
    assert max(reconnects.values()) >= 256, reconnects
    assert sum(dropped.values()) <= 2 * 64, dropped  # at most the steps the outage overlapped
    assert all(dropped[s] == 0 for s in range(STEPS - 3, STEPS + 1)), dropped  # sessions back: later steps lose nothing
    assert client.get_run(run_id).info.status == "FINISHED"
