"""Shared fixtures. Tiers are markers: unit (default), integration, e2e (see pyproject.toml)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
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

    from rlsvc.cluster.ray_setup import WORKER_ENV, ZERO_COPY_ENV

    ray.init(
        address="local",  # its own, even while another test's `ray start` cluster is the machine's current one
        num_cpus=8,
        resources={"rlsvc_gpu_node": 1.0, "rlsvc_cpu_node": 1.0},
        include_dashboard=False,
        runtime_env={"env_vars": {**WORKER_ENV, **ZERO_COPY_ENV, "RAY_AUTH_MODE": "disabled"}},
    )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def mlflow_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sqlite MLflow store with its tables made, once a session. MLflow's first open of a new
    sqlite file runs its whole chain of schema migrations, and a job waits for it before it
    registers with Ray (rlsvc/job/start.py): 2-3 s of every test job's start-up on the quiet
    machine, more under load. A test's store is a copy of this one (`mlflow_store`), which a job
    opens at once, as it would its team's existing store. The default job's own first run, store
    made from nothing, stays tested (tests/e2e/test_train_learns.py, the quick-start notebook)."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


def mlflow_store(template: Path, folder: Path, name: str = "mlflow.db") -> str:
    """A copy of the session's made store (`mlflow_template`) in `folder`; returns its URI."""
    shutil.copyfile(template, folder / name)
    return f"sqlite:///{folder / name}"


LEAN_JOB = ["tracking.log_model=false", "cluster.include_dashboard=false"]
"""Overrides for test jobs that check neither the MLflow model nor the Ray dashboard: the end
logs no MLflow model (a copy of the checkpoint, loaded twice more in the driver) and the job's
local cluster starts no dashboard, both on the two cores the job's actors need. Each stays tested
where it is the subject: the model in tests/e2e/test_train_learns.py and the quick-start
notebook, the dashboard in tests/e2e/test_operator_views.py and test_ray_job_submit.py. Not for a
job whose actors are meant to die: without the dashboard Ray's state API is gone, and with it
the count of Ray's restarts against `faults.*` (`cluster.include_dashboard`)."""


@pytest.fixture
def mlflow_uri(mlflow_template: Path, tmp_path: Path) -> str:
    """A made MLflow store of this test's own (see `mlflow_template`)."""
    return mlflow_store(mlflow_template, tmp_path)


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


def submit_ray_job(cmd: list[str], env: dict[str, str], timeout_s: float = 300) -> subprocess.CompletedProcess:
    """`ray job submit ...`, tried again while the job server answers that no agent is available
    yet: the head's dashboard serves its HTTP API before the node's agent has registered (on a
    loaded machine, for tens of seconds), and says "please try again later". Nothing is submitted
    by such a refusal, so the same submission id can be sent again. Any other failure returns."""
    deadline = time.time() + timeout_s
    while True:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=max(deadline - time.time(), 10))
        if out.returncode == 0 or "No available agent to submit job" not in out.stderr or time.time() > deadline - 10:
            return out
        time.sleep(2)


SERVER_START_S = 90.0  # imports take seconds, more on a loaded machine
StartServer = Callable[..., tuple[subprocess.Popen, str]]


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it lingers: by PID, never by name."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[StartServer]:
    """start(max_sessions, port=0, *overrides) -> (process, url): a task's OpenEnv server as its
    own process (`python -m rlsvc.envs.serve`, BlackJack unless `overrides` say otherwise), once
    it answers; every one is stopped by its PID at the end of the test."""
    procs: list[subprocess.Popen] = []

    def start(max_sessions: int, port: int = 0, *overrides: str) -> tuple[subprocess.Popen, str]:
        n = len(procs)
        port_file, log_path = tmp_path / f"server{n}.port", tmp_path / f"server{n}.log"
        cmd = [
            sys.executable,
            "-m",
            "rlsvc.envs.serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max-sessions",
            str(max_sessions),
            "--port-file",
            str(port_file),
            *overrides,
        ]
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        deadline = time.monotonic() + SERVER_START_S
        while not port_file.exists():
            assert proc.poll() is None, f"server exited with {proc.returncode}: {log_path.read_text()}"
            assert time.monotonic() < deadline, f"server not up after {SERVER_START_S} s: {log_path.read_text()}"
            time.sleep(0.1)
        return proc, f"http://127.0.0.1:{int(port_file.read_text())}"

    try:
        yield start
    finally:
        for proc in procs:
            stop_process(proc)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[dict[str, str]]:
    """A real S3-compatible server (moto's server mode) on 127.0.0.1, as its own process; yields
    the environment that points boto/s3fs (and so fsspec's `s3://`) at it. Stopped by its PID."""
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_START_S
    while True:
        try:
            urllib.request.urlopen(url, timeout=2)
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, f"moto server not up: {log.read_text()}"
            time.sleep(0.2)
    env = {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    try:
        yield env
    finally:
        stop_process(proc)


@pytest.fixture
def s3_bucket(s3_server: dict[str, str], monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    """`s3://BUCKET` on the test's S3 server, a new bucket per test, with this process's
    environment pointing at the server."""
    import fsspec
    from s3fs import S3FileSystem

    for k, v in s3_server.items():
        monkeypatch.setenv(k, v)
    S3FileSystem.clear_instance_cache()  # an instance cached before the variables were set
    bucket = f"rlsvc-{abs(hash(request.node.nodeid)) % 10**8}-{time.monotonic_ns() % 10**6}"
    fsspec.filesystem("s3", skip_instance_cache=True).mkdir(bucket)
    return f"s3://{bucket}"


# Every metric of rlsvc/cluster/metrics.py and the role it is tagged with (the e2e tests that read
# them from Ray's metrics endpoint and from Prometheus)
RLSVC_METRICS = {
    "rlsvc_episodes_per_second": "driver",
    "rlsvc_tokens_per_second": "rollout",
    "rlsvc_mean_return": "reward",
    "rlsvc_staleness": "buffer",
    "rlsvc_buffer_depth": "buffer",
    "rlsvc_weight_sync_seconds": "trainer",
    "rlsvc_step_phase_seconds": "driver",
    "rlsvc_env_errors_total": "env",
    "rlsvc_episodes_total": "driver",
    "rlsvc_validation_return": "driver",
    "rlsvc_actor_restarts": "driver",
    "rlsvc_consecutive_failures": "driver",
    "rlsvc_recovery_steps_redone": "driver",
    "rlsvc_recovery_seconds": "driver",
}


TINY_HF_SHAPE = dict(
    vocab_size=320,
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=256,
    max_position_embeddings=128,
)


def tiny_hf_checkpoint(family: str, folder: Path):
    """A random model of `family` saved as a Hugging Face folder; every parameter (biases and
    norms included) perturbed, so a weight the adapter misses changes the logits."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config, cls = {
        "qwen3": (Qwen3Config(head_dim=32, tie_word_embeddings=True, **TINY_HF_SHAPE), Qwen3ForCausalLM),
        "llama": (LlamaConfig(rope_theta=500000.0, tie_word_embeddings=False, **TINY_HF_SHAPE), LlamaForCausalLM),
        "qwen2": (Qwen2Config(tie_word_embeddings=True, **TINY_HF_SHAPE), Qwen2ForCausalLM),
    }[family]
    model = cls(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    model.save_pretrained(folder)
    return model


class RulesFleet:
    """The BlackJack rules in-process; `lose` = {deal seed: n}: the first n episodes begun on that
    deal are lost at their first step (an env backend gone: the episode comes back failed)."""

    def __init__(self, num_slots: int, lose: dict[int, int] | None = None) -> None:
        self.num_slots = num_slots
        self.games: dict[int, object] = {}
        self.lose = dict(lose or {})
        self.doomed: set[int] = set()

    def _obs(self, g):
        v = g.view()
        from rlsvc.envs.blackjack import BlackjackObservation

        return BlackjackObservation(
            player_sum=v.player_sum, dealer_card=v.dealer_card, usable_ace=v.usable_ace, done=g.done, reward=g.reward, outcome=g.outcome
        )

    def reset(self, slots, seeds):
        from rlsvc.envs.blackjack import seeded_game

        for s, seed in zip(slots, seeds):
            self.games[s] = seeded_game(seed)
            self.doomed.discard(s)
            if self.lose.get(seed, 0) > 0:
                self.lose[seed] -= 1
                self.doomed.add(s)
        return [self._obs(self.games[s]) for s in slots]

    def step(self, slots, actions):
        from rlsvc.cluster.fleet import LostEpisode

        out = []
        for s, a in zip(slots, actions):
            if s in self.doomed:
                out.append(LostEpisode())  # what the Ray fleet returns for a session lost with its actor
                continue
            self.games[s].step(a)
            out.append(self._obs(self.games[s]))
        return out


def load_script(name: str):
    """scripts/NAME.py as a module (scripts/ is not a package: the files run as plain scripts)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
