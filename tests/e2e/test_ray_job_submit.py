"""The same job through `ray start --head` + `ray job submit`, on a cluster this test starts and
stops by PID."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def head(tmp_path: Path):
    gcs, dash = _free_port(), _free_port()
    short_tmp = tempfile.mkdtemp(prefix="rj-", dir="/tmp")  # Ray's unix sockets need a short path
    # the job's `python` is looked up on the PATH that `ray start` had: put this venv first
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = [str(BIN / "ray"), "start", "--head", "--block", f"--port={gcs}", f"--dashboard-port={dash}", "--dashboard-host=127.0.0.1",
           "--node-ip-address=127.0.0.1", "--num-cpus=8", '--resources={"rlsvc_gpu_node": 1, "rlsvc_cpu_node": 1}',
           f"--temp-dir={short_tmp}", "--include-dashboard=true"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{dash}"
    deadline = time.time() + 120
    while time.time() < deadline:
        ok = subprocess.run([str(BIN / "ray"), "job", "list", "--address", url], env=env, capture_output=True).returncode == 0
        if ok:
            break
        time.sleep(2)
    else:
        os.killpg(proc.pid, signal.SIGTERM)
        pytest.fail("ray head did not come up")
    yield url, env
    # `ray start --block` stops the processes it started when it is terminated
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    shutil.rmtree(short_tmp, ignore_errors=True)


def test_ray_job_submit_runs_the_training_job(head, tmp_path: Path):
    url, env = head
    runtime_env = {"env_vars": {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}}
    cmd = [str(BIN / "ray"), "job", "submit", "--address", url, "--working-dir", str(REPO), "--runtime-env-json", json.dumps(runtime_env), "--",
           "python", "-m", "rlsvc.train", "run.steps=2", "eval.episodes=500", "eval.every_steps=1", f"run.output_dir={tmp_path / 'runs'}"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    assert "succeeded" in out.stdout
    result = json.loads(next((tmp_path / "runs").glob("*/result.json")).read_text())
    assert result["steps"] == 2 and Path(result["checkpoint"], "config.json").is_file()
    assert result["tracking_uri"] == runtime_env["env_vars"]["MLFLOW_TRACKING_URI"]
