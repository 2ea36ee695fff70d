"""JupyterLab serves notebooks/ as `make notebooks` starts it: on 127.0.0.1, both notebooks listed
through Jupyter Server's REST API, the Lab page served, and a kernel started that imports rlsvc.
The server is stopped by its PID."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_jupyterlab_serves_the_notebooks_and_runs_a_kernel(tmp_path: Path):
    jupyter = BIN / "jupyter"
    assert jupyter.exists() or shutil.which("jupyter"), "JupyterLab is not installed: `make install` (dev extra) or the notebooks extra"
    port, token = _free_port(), secrets.token_hex(16)
    cmd = [str(jupyter), "lab", "--ip=127.0.0.1", "--no-browser", "--notebook-dir=notebooks", f"--port={port}"]
    cmd += [f"--IdentityProvider.token={token}", "--ServerApp.port_retries=0", *(["--allow-root"] if os.geteuid() == 0 else [])]
    env = {"JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_DATA_DIR": str(tmp_path / "data"), "HOME": str(tmp_path)}
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    base = f"http://127.0.0.1:{port}"

    def call(path: str, method: str = "GET", body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{base}{path}", data=data, method=method, headers={"Authorization": f"token {token}"})
        return opener.open(req, timeout=30)

    with open(tmp_path / "lab.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
    kernel = None
    try:
        deadline = time.time() + 120
        while True:
            try:
                contents = json.loads(call("/api/contents").read())
                break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, (tmp_path / "lab.log").read_text()[-2000:]
                time.sleep(0.5)
        names = {item["name"] for item in contents["content"]}
        assert {"quickstart.ipynb", "compare_runs.ipynb"} <= names
        notebook = json.loads(call("/api/contents/quickstart.ipynb").read())
        assert notebook["type"] == "notebook" and notebook["content"]["cells"]
        page = call("/lab").read().decode()
        assert "JupyterLab" in page
        kernel = json.loads(call("/api/kernels", "POST", {"name": "python3"}).read())
        specs = json.loads(call("/api/kernelspecs").read())
        argv = specs["kernelspecs"][specs["default"]]["spec"]["argv"]
        # the kernel runs an interpreter that can import the project (the venv's, or the one that started Lab)
        out = subprocess.run(
            [argv[0] if argv[0] != "python" else sys.executable, "-c", "import rlsvc; print('ok')"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.stdout.strip() == "ok", out.stderr
        assert kernel["execution_state"] in {"starting", "idle", "busy"}
    finally:
        if kernel is not None:
            try:
                call(f"/api/kernels/{kernel['id']}", "DELETE")
            except OSError:
                pass
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
