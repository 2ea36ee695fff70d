"""What an operator looks at during a job, against one live job: Prometheus' data, the Grafana
dashboard's queries, and the Ray dashboard and the MLflow UI in a real browser.

A Ray head is started with `ray start` (its dashboard on 127.0.0.1) next to Prometheus
(`scripts/monitor.py`, what `make monitor` runs: Debian's binary fetched by `make prometheus`, with
monitoring/prometheus.yml finding every node through Ray's service-discovery file), and the default
job is submitted to it with `ray job submit`, 1 s per env step; once it trains, its env actor is
killed every 2 s for 12 s (most of a step: episodes are lost and the env-error counter moves).
Then:
- while it trains, headless Chromium (Debian's `chromium`, driven through its `chromedriver` by
  Selenium) opens the Ray dashboard's Actors view, which must list every rlsvc actor of the plan;
- after it, Prometheus' HTTP API must hold samples of every rlsvc_* metric, tagged with the job's
  run and the role that reports it, and every query of monitoring/grafana/rlsvc.json must return
  data over the job's time, as its panels would draw it;
- the Jobs view must show the submission, succeeded, with the MLflow run id in its metadata;
- `mlflow server` on the job's store: the run page must show the run's metrics, and its Artifacts
  tab the reward curve (an image the browser decoded).
Every page is saved as a screenshot in $RLSVC_SCREENSHOTS (default test-artifacts/screenshots/;
`make screenshots` writes docs/img/). Every process is stopped by its PID."""

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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import RLSVC_METRICS, load_script, submit_ray_job
from selenium.webdriver.common.by import By

from rlsvc.cluster.placement import actor_name, planned
from rlsvc.config import load_config

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
monitor = load_script("monitor")
prometheus_binary, render = monitor.prometheus_binary, monitor.render

METRICS = RLSVC_METRICS
DASHBOARD = REPO / "monitoring/grafana/rlsvc.json"
SCREENSHOTS = Path(os.environ.get("RLSVC_SCREENSHOTS") or REPO / "test-artifacts" / "screenshots")
STEPS = 12
NO_BROWSER = "no chromium/chromedriver: `make chromium` installs Debian's chromium and chromium-driver (as root)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _open(url: str, timeout: float = 10) -> bytes:
    return urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=timeout).read()


def _get(url: str) -> dict:
    return json.loads(_open(url))


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 90) -> None:
    deadline = time.time() + timeout_s
    while True:
        try:
            _open(url, timeout=2)
            return
        except OSError:
            assert proc.poll() is None and time.time() < deadline, f"{url} did not come up: {log.read_text()[-2000:]}"
            time.sleep(0.5)


def _stop_group(proc: subprocess.Popen, grace_s: float = 10) -> None:
    """SIGTERM the process group `proc` leads (its own session), SIGKILL what is left after grace."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # children of `ray start` (raylet, GCS, workers) included
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


@dataclass
class LiveJob:
    work: Path
    prometheus: str
    dashboard: str
    gcs: str
    submission: str
    started: float
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def runs(self) -> Path:
        return self.work / "runs"

    @property
    def tracking_uri(self) -> str:
        return f"sqlite:///{self.work / 'mlflow.db'}"

    def status(self) -> str:
        from ray.job_submission import JobSubmissionClient

        return str(JobSubmissionClient(self.dashboard).get_job_status(self.submission).value)

    def logs(self) -> str:
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.dashboard).get_job_logs(self.submission)

    def trained_steps(self) -> int:
        ledgers = list(self.runs.glob("*/trained.jsonl"))
        return ledgers[0].read_text().count('"step"') if ledgers else 0

    def finished(self, timeout_s: float = 900) -> dict:
        """Waits for the job to end; it must have succeeded. Its result.json."""
        deadline = time.time() + timeout_s
        while (status := self.status()) not in {"SUCCEEDED", "FAILED", "STOPPED"} and time.time() < deadline:
            time.sleep(1)
        assert status == "SUCCEEDED", f"job {status}: {self.logs()[-3000:]}"
        [result] = [json.loads(p.read_text()) for p in self.runs.glob("*/result.json")]
        return result


@pytest.fixture(scope="module")
def live(tmp_path_factory, mlflow_template) -> Iterator[LiveJob]:
    assert prometheus_binary(), "no prometheus binary: `make prometheus` fetches Debian's package into .cache/"
    work = tmp_path_factory.mktemp("live")
    shutil.copyfile(mlflow_template, work / "mlflow.db")  # a made store: tests/conftest.py
    ray_tmp = tempfile.mkdtemp(prefix="rp-", dir="/tmp")  # the head's temp root; a short path for Ray's sockets
    prom_port, dash_port, gcs_port = _free_port(), _free_port(), _free_port()
    prom_url = f"http://127.0.0.1:{prom_port}"
    # the job's `python` is looked up on the PATH that `ray start` had: this venv first; metrics
    # reach the node's agent every second (Ray's default: every 10 s)
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "disabled",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "RAY_metrics_report_interval_ms": "1000",
        "RAY_PROMETHEUS_HOST": prom_url,
    }
    job = LiveJob(work, prom_url, f"http://127.0.0.1:{dash_port}", f"127.0.0.1:{gcs_port}", f"rlsvc-live-{os.getpid()}", 0.0)
    try:
        monitor_cmd = [sys.executable, str(REPO / "scripts/monitor.py"), "--port", str(prom_port), "--ray-temp-dir", ray_tmp]
        monitor_cmd += ["--scrape-interval", "1s", "--data", str(work / "prometheus-data")]
        with open(work / "prometheus.log", "w") as log:
            job.procs.append(subprocess.Popen(monitor_cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        _wait_http(f"{prom_url}/-/ready", job.procs[-1], work / "prometheus.log")

        # the resources a local job gives its own cluster (rlsvc/cluster/ray_setup.py), so the
        # default job's plan fits; the head runs in `work`, where MLflow's local artifacts go
        head = [str(BIN / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={gcs_port}"]
        head += ["--dashboard-host=127.0.0.1", f"--dashboard-port={dash_port}", "--include-dashboard=true", f"--temp-dir={ray_tmp}"]
        head += [f"--metrics-export-port={_free_port()}", "--num-cpus=8", "--disable-usage-stats"]
        head += ["--resources=" + json.dumps({"rlsvc_gpu_node": 1, "rlsvc_cpu_node": 1})]
        with open(work / "head.log", "w") as log:
            job.procs.append(subprocess.Popen(head, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        _wait_http(f"{job.dashboard}/api/jobs/", job.procs[-1], work / "head.log")

        submit = [str(BIN / "ray"), "job", "submit", "--no-wait", "--address", job.dashboard, "--submission-id", job.submission]
        submit += ["--runtime-env-json", json.dumps({"env_vars": {"MLFLOW_TRACKING_URI": job.tracking_uri}})]
        submit += ["--", "python", "-m", "rlsvc.train", f"run.steps={STEPS}", "env.step_latency_ms=1000"]
        submit += ["eval.every_steps=6", "eval.episodes=500", f"run.output_dir={job.runs}"]
        job.started = time.time()
        out = submit_ray_job(submit, env, timeout_s=180)
        assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]

        # once it trains: kill its env actor every 2 s for 12 s
        deadline = time.time() + 600
        while job.trained_steps() < 3:
            assert job.status() in {"PENDING", "RUNNING"} and time.time() < deadline, job.logs()[-3000:]
            time.sleep(0.5)
        chaos = [sys.executable, "-m", "rlsvc.chaos", "--address", job.gcs, "--roles", "env", "--first", "0", "--every", "2"]
        with open(work / "chaos.log", "w") as log:
            job.procs.append(
                subprocess.Popen([*chaos, "--duration", "12"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            )
        yield job
    finally:
        for proc in reversed(job.procs):
            _stop_group(proc)
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium through its chromedriver (Selenium); 1600 px wide, as on a laptop."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, NO_BROWSER
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    # --no-sandbox: Chromium's sandbox refuses to run as root (CI); only 127.0.0.1 pages are opened
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--no-proxy-server", "--window-size=1600,1000"):
        options.add_argument(arg)
    chrome = webdriver.Chrome(options=options, service=Service(driver))
    try:
        yield chrome
    finally:
        chrome.quit()


@pytest.fixture(scope="module")
def mlflow_ui(live: LiveJob) -> Iterator[str]:
    """`mlflow server` on the job's store, once the job has ended."""
    live.finished()
    port = _free_port()
    cmd = [str(BIN / "mlflow"), "server", "--backend-store-uri", live.tracking_uri, "--host", "127.0.0.1", "--port", str(port)]
    with open(live.work / "mlflow-server.log", "w") as log:
        proc = subprocess.Popen([*cmd, "--workers", "1"], cwd=live.work, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_http(f"http://127.0.0.1:{port}/health", proc, live.work / "mlflow-server.log")
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop_group(proc)


def page_text(chrome, url: str, needles: list[str], timeout_s: float = 60) -> str:
    """Open `url` and wait until the page's visible text holds every needle; the text."""
    chrome.get(url)
    deadline = time.time() + timeout_s
    while True:
        text = chrome.find_element(By.TAG_NAME, "body").text
        missing = [n for n in needles if n not in text]
        if not missing:
            return text
        assert time.time() < deadline, f"{url} never showed {missing}; it shows: {text[:3000]}"
        time.sleep(1)


def wait_for(check, timeout_s: float = 60):
    """Poll `check` every second until it returns something true, or the time is up; its last value."""
    deadline = time.time() + timeout_s
    while not (value := check()) and time.time() < deadline:
        time.sleep(1)
    return value


def screenshot(chrome, name: str, height: int = 1000) -> Path:
    """The window, `height` px tall, as SCREENSHOTS/name."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    chrome.set_window_size(1600, height)
    time.sleep(1)  # a resize re-lays the page out
    path = SCREENSHOTS / name
    assert chrome.save_screenshot(str(path)), f"no screenshot of {chrome.current_url}"
    chrome.set_window_size(1600, 1000)
    return path


def test_the_dashboards_actors_view_lists_every_rlsvc_actor_while_the_job_trains(live: LiveJob, browser):
    names = [actor_name(role, i, p.count) for role, p in planned(load_config(None)).items() for i in range(p.count)]
    # the table lists each actor's class, name and state
    text = page_text(browser, f"{live.dashboard}/#/actors", [*names, "RolloutWorker", "TrainerWorker", "EnvWorker", "ALIVE"])
    assert live.status() == "RUNNING" and live.trained_steps() < STEPS, "the job ended before its actors were looked at"
    screenshot(browser, "ray-dashboard-actors.png", height=1150)
    total = re.search(r"TOTAL\s*x\s*(\d+)", text)  # the table's count, the job's supervisor included
    assert total and int(total[1]) > len(names), text[:2000]


def test_prometheus_holds_every_rlsvc_metric_of_the_job(live: LiveJob):
    live.finished()
    [run] = [p.name for p in live.runs.iterdir()]
    time.sleep(2)  # a last scrape
    # Prometheus found the nodes through Ray's file, and kept every metric of the run
    assert _get(f"{live.prometheus}/api/v1/query?query=" + urllib.parse.quote('count(last_over_time(up{job="ray"}[30m]))'))["data"][
        "result"
    ]
    missing = {}
    for name, role in METRICS.items():
        selector = f'{{__name__=~"(ray_)?{name}(_total)?", run="{run}", role="{role}"}}'
        found = _get(f"{live.prometheus}/api/v1/query?query=" + urllib.parse.quote(f"last_over_time({selector}[30m])"))["data"]["result"]
        if not found:
            missing[name] = role
    assert not missing, f"no samples in Prometheus for {missing} (job log: {live.logs()[-1500:]})"


def test_every_dashboard_query_draws_data_for_the_job(live: LiveJob):
    live.finished()
    [run] = [p.name for p in live.runs.iterdir()]
    window = urllib.parse.urlencode({"start": f"{live.started:.0f}", "end": f"{time.time():.0f}", "step": "2"})
    empty = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel["targets"]:
            if "rlsvc_test_accuracy" in target["expr"]:  # only jobs with eval.test_every_steps (a reasoning task) set it
                continue
            expr = target["expr"].replace("$run", run)
            series = _get(f"{live.prometheus}/api/v1/query_range?query={urllib.parse.quote(expr)}&{window}")["data"]["result"]
            if not series:
                empty.append(f"{panel['title']}: {expr}")
    assert not empty, f"dashboard queries with no data: {empty}"


def test_the_dashboards_jobs_view_shows_the_submission_and_its_mlflow_run(live: LiveJob, browser):
    result = live.finished()
    page_text(browser, f"{live.dashboard}/#/jobs", [live.submission, "SUCCEEDED"])
    text = page_text(browser, f"{live.dashboard}/#/jobs/{live.submission}/info", ["User-provided metadata", result["mlflow_run_id"]])
    assert re.search(rf'"rlsvc\.mlflow_run_id": "{result["mlflow_run_id"]}"', text), text[:3000]
    # the metadata's preview is cut to one line: its Expand opens all of it
    browser.find_element(By.XPATH, "//*[normalize-space(text())='Expand']").click()
    dialog = wait_for(
        lambda: [d.text for d in browser.find_elements(By.CSS_SELECTOR, "[role=dialog]") if result["mlflow_run_id"] in d.text]
    )
    assert dialog, "the metadata dialog did not open"
    screenshot(browser, "ray-dashboard-job.png")


def test_the_mlflow_run_page_shows_the_runs_metrics_and_reward_curve(live: LiveJob, mlflow_ui: str, browser):
    from mlflow.tracking import MlflowClient

    result = live.finished()
    run = MlflowClient(live.tracking_uri).get_run(result["mlflow_run_id"])
    page = f"{mlflow_ui}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
    text = page_text(browser, page, [run.info.run_name, "Metrics (", "return_mean", "eval/val_return"])
    shown = int(re.search(r"Metrics \((\d+)\)", text)[1])
    assert shown == len(run.data.metrics), (shown, sorted(run.data.metrics))
    for close in browser.find_elements(By.CSS_SELECTOR, "button[aria-label='Close']"):  # MLflow's assistant panel
        close.click()
    metrics = browser.find_element(By.XPATH, "//*[starts-with(normalize-space(text()), 'Metrics (')]")
    browser.execute_script("arguments[0].scrollIntoView({block: 'start'})", metrics)
    screenshot(browser, "mlflow-run.png")

    # the Artifacts tab shows the file: the browser decoded an image of reward_curve.png's size
    from PIL import Image

    [curve] = live.runs.glob("*/reward_curve.png")  # what the job logged as the artifact
    with Image.open(curve) as png:
        size = list(png.size)
    page_text(browser, f"{page}/artifacts/reward_curve.png", ["reward_curve.png", "checkpoint", "config.yaml"])
    script = "return [...document.images].filter(i => i.complete).map(i => [i.src.slice(0, 60), i.naturalWidth, i.naturalHeight])"
    assert wait_for(lambda: size in [shown[1:] for shown in browser.execute_script(script)]), (
        f"no {size} image among the page's images: {browser.execute_script(script)}"
    )
    screenshot(browser, "mlflow-reward-curve.png")


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


def test_the_dashboard_charts_every_metric():
    exprs = " ".join(t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"])
    assert {name for name in METRICS if f"ray_{name}" in exprs} == set(METRICS)
