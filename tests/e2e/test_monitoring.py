"""Prometheus against a live job: `scripts/monitor.py` (what `make monitor` runs) starts Debian's
Prometheus (`make prometheus`) with monitoring/prometheus.yml, which finds every node's metrics
agent through Ray's service-discovery file; a job trains while its env actor is killed every 2 s for
12 s (1 s per env step makes that most of a step, so episodes are lost and the env-error counter
moves too); then Prometheus' HTTP API must hold samples of every rlsvc_*
metric, tagged with the job's run and the role that reports it, and every query of the Grafana
dashboard (monitoring/grafana/rlsvc.json) must return data over the job's time, as its panels would
draw it. Every process is stopped by its PID."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from conftest import RLSVC_METRICS, load_script

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
monitor = load_script("monitor")
prometheus_binary, render = monitor.prometheus_binary, monitor.render

METRICS = RLSVC_METRICS
DASHBOARD = REPO / "monitoring/grafana/rlsvc.json"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    return json.loads(opener.open(url, timeout=10).read())


def test_the_metrics_listed_in_the_docs_are_the_ones_the_job_exports():
    source = (REPO / "rlsvc/cluster/metrics.py").read_text()
    assert set(re.findall(r'"(rlsvc_[a-z_]+)"', source)) == set(METRICS)


def test_the_rendered_config_is_valid_prometheus_config(tmp_path: Path):
    binary = prometheus_binary()
    assert binary, "no prometheus binary: `make prometheus` fetches Debian's package into .cache/"
    config = tmp_path / "prometheus.yml"
    config.write_text(render(tmp_path / "ray", "1s"))
    out = subprocess.run(
        [str(Path(binary).with_name("promtool")), "check", "config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert str(tmp_path / "ray" / "prom_metrics_service_discovery.json") in config.read_text()


def test_prometheus_holds_every_rlsvc_metric_of_a_live_job(tmp_path: Path):
    assert prometheus_binary(), "no prometheus binary: `make prometheus` fetches Debian's package into .cache/"
    ray_tmp = tempfile.mkdtemp(prefix="rp-", dir="/tmp")  # this job's Ray temp root; a short path for its sockets
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    monitor_cmd = [sys.executable, str(REPO / "scripts/monitor.py"), "--port", str(port), "--ray-temp-dir", f"{ray_tmp}/ray"]
    monitor_cmd += ["--scrape-interval", "1s", "--data", str(tmp_path / "prometheus-data")]
    with open(tmp_path / "prometheus.log", "w") as log:
        prom = subprocess.Popen(monitor_cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    chaos = None
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.build_opener(urllib.request.ProxyHandler({})).open(f"{url}/-/ready", timeout=2)
                break
            except OSError:
                assert prom.poll() is None and time.time() < deadline, (tmp_path / "prometheus.log").read_text()[-2000:]
                time.sleep(0.5)

        # metrics reach the node's agent every second (Ray's default: every 10 s)
        env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": ray_tmp, "RAY_metrics_report_interval_ms": "1000"}
        cmd = [sys.executable, "-m", "rlsvc.train", "run.steps=16", "env.step_latency_ms=1000", "eval.every_steps=8", "eval.episodes=500"]
        cmd += [f"run.output_dir={tmp_path / 'runs'}", f"tracking.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"]
        started = time.time()
        with open(tmp_path / "job.log", "w") as out:
            job = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
            deadline = time.time() + 600
            while job.poll() is None and time.time() < deadline:  # once it trains: kill its env actor every 2 s for 12 s
                address = re.search(r"ray=(127\.0\.0\.1:\d+)", (tmp_path / "job.log").read_text())
                ledger = list((tmp_path / "runs").glob("*/trained.jsonl"))
                if address and ledger and ledger[0].read_text().count('"step"') >= 3:
                    chaos_cmd = [sys.executable, "-m", "rlsvc.chaos", "--address", address.group(1), "--roles", "env"]
                    chaos = subprocess.Popen(
                        [*chaos_cmd, "--first", "0", "--every", "2", "--duration", "12"], env=env, stdout=out, stderr=subprocess.STDOUT
                    )
                    break
                time.sleep(0.2)
            assert job.wait(timeout=900) == 0, (tmp_path / "job.log").read_text()[-3000:]
        [run] = [p.name for p in (tmp_path / "runs").iterdir()]
        time.sleep(2)  # a last scrape

        # Prometheus found the nodes through Ray's file, and kept every metric of the run
        assert _get(f"{url}/api/v1/query?query=" + urllib.parse.quote('count(last_over_time(up{job="ray"}[30m]))'))["data"]["result"]
        missing = {}
        for name, role in METRICS.items():
            selector = f'{{__name__=~"(ray_)?{name}(_total)?", run="{run}", role="{role}"}}'
            found = _get(f"{url}/api/v1/query?query=" + urllib.parse.quote(f"last_over_time({selector}[30m])"))["data"]["result"]
            if not found:
                missing[name] = role
        assert not missing, f"no samples in Prometheus for {missing} (job log: {(tmp_path / 'job.log').read_text()[-1500:]})"

        # every panel of the dashboard draws something for this run over the job's time
        window = urllib.parse.urlencode({"start": f"{started:.0f}", "end": f"{time.time():.0f}", "step": "2"})
        empty = []
        for panel in json.loads(DASHBOARD.read_text())["panels"]:
            for target in panel["targets"]:
                expr = target["expr"].replace("$run", run)
                series = _get(f"{url}/api/v1/query_range?query={urllib.parse.quote(expr)}&{window}")["data"]["result"]
                if not series:
                    empty.append(f"{panel['title']}: {expr}")
        assert not empty, f"dashboard queries with no data: {empty}"
    finally:
        if chaos is not None and chaos.poll() is None:
            chaos.kill()
            chaos.wait(timeout=60)
        if prom.poll() is None:
            os.killpg(prom.pid, signal.SIGTERM)  # its own process group: Prometheus itself (exec'd)
            prom.wait(timeout=60)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_the_dashboard_charts_every_metric():
    exprs = " ".join(t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"])
    assert {name for name in METRICS if f"ray_{name}" in exprs} == set(METRICS)
