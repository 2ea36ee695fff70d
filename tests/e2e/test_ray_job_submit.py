"""The deployed cluster, on one machine: a multi-node Ray cluster started with `ray start` from the
rayStartParams of the KubeRay cpu-tiny overlay (a head with no CPUs, two gpu-workers nodes and two
cpu-workers nodes, each a raylet of its own). The overlay's RayJob, submitted with `ray job
submit`, has each actor on its group (Ray's state API), loses one node of each group mid-run and
finishes. Every process is stopped by its PID."""

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
from pathlib import Path

import pytest
import yaml
from conftest import submit_ray_job
from deploy_shapes import parse_resources_param, render_kustomize

from rlsvc.cluster.placement import GPU_GROUP_ROLES, ROLES, actor_name, planned
from rlsvc.config import load_config

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
OVERLAY = REPO / "kuberay/overlays/cpu-tiny"
GROUP_MARK = "rlsvc_test_group_"  # an extra resource per raylet, only to tell the test which group it is
NODE_MARK = "rlsvc_test_node_"  # and one naming the raylet itself (`gpu-workers-1`), to kill its process group
# Cluster-facing settings the test replaces: everything listens on 127.0.0.1 here.
LOCAL_ONLY = {"dashboard-host", "metrics-export-port"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_start_args(params: dict[str, str], group: str, node: str) -> list[str]:
    """`ray start` flags from a group's rayStartParams, as KubeRay builds them, plus the marks."""
    marks = {f"{GROUP_MARK}{group}": 1, f"{NODE_MARK}{node}": 1}
    args = []
    for key, value in params.items():
        if key in LOCAL_ONLY:
            continue
        if key == "resources":
            value = json.dumps({**parse_resources_param(value), **marks})
        args.append(f"--{key}={value}")
    if "resources" not in params:
        args.append(f"--resources={json.dumps(marks)}")
    return args


class ManifestCluster:
    """Head and worker raylets, one `ray start --block` process group each."""

    def __init__(self, raycluster: dict, tmp: str, env: dict[str, str] | None = None) -> None:
        self.procs: list[subprocess.Popen] = []
        self.by_node: dict[str, subprocess.Popen] = {}
        self.tmp = tmp
        gcs, dash = _free_port(), _free_port()
        self.url, self.gcs = f"http://127.0.0.1:{dash}", f"127.0.0.1:{gcs}"
        # the job's `python` is looked up on the PATH that `ray start` had: put this venv first
        path = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
        self.env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PATH": path, **(env or {})}
        head = raycluster["spec"]["headGroupSpec"]
        self._start(
            [
                "--head",
                f"--port={gcs}",
                f"--dashboard-port={dash}",
                "--dashboard-host=127.0.0.1",
                "--include-dashboard=true",
                f"--metrics-export-port={_free_port()}",
                f"--temp-dir={tmp}",
                *ray_start_args(head["rayStartParams"], "head", "head"),
            ],
            "head",
        )
        self._wait(lambda: self._ok([str(BIN / "ray"), "job", "list", "--address", self.url]), "head")
        self.groups = {"head": 1}
        for g in raycluster["spec"]["workerGroupSpecs"]:
            for i in range(g["replicas"]):
                # a node's own temp dir, as on a real node's disk: raylets sharing one would unpack
                # the job's working_dir into the same folder at the same time
                node_tmp = Path(tmp, f"{g['groupName']}-{i}")
                node_tmp.mkdir()
                node = f"{g['groupName']}-{i}"
                self._start(
                    [f"--address={self.gcs}", f"--temp-dir={node_tmp}", *ray_start_args(g["rayStartParams"], g["groupName"], node)], node
                )
            self.groups[g["groupName"]] = g["replicas"]
        self._wait(lambda: len(self.nodes()) == sum(self.groups.values()), "worker raylets")

    def _start(self, args: list[str], node: str) -> None:
        cmd = [str(BIN / "ray"), "start", "--block", "--node-ip-address=127.0.0.1", "--disable-usage-stats", *args]
        proc = subprocess.Popen(cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(proc)
        self.by_node[node] = proc

    def _ok(self, cmd: list[str]) -> bool:
        return subprocess.run(cmd, env=self.env, capture_output=True).returncode == 0

    def _wait(self, ready, what: str, timeout_s: float = 180) -> None:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if ready():
                return
            time.sleep(2)
        self.stop()
        pytest.fail(f"{what} did not come up")

    def nodes(self) -> list[dict]:
        from ray.util.state import list_nodes

        try:
            return [n for n in list_nodes(address=self.url, detail=True, raise_on_missing_output=False) if n.state == "ALIVE"]
        except Exception:  # the API server is still starting
            return []

    def node_groups(self, mark: str = GROUP_MARK) -> dict[str, str]:
        """node id -> the worker group (or head) its raylet was started from (with NODE_MARK: the
        raylet's own name)."""
        out = {}
        for n in self.nodes():
            [group] = [k.removeprefix(mark) for k in n.resources_total if k.startswith(mark)]
            out[n.node_id] = group
        return out

    def kill_node(self, node: str) -> None:
        """SIGKILL a whole node: its raylet, object store and every worker (actor) it started,
        which stay in the `ray start` process group, as a machine or pod lost at once would."""
        pgid = self.by_node[node].pid
        os.killpg(pgid, signal.SIGKILL)
        self.by_node[node].wait(timeout=30)
        deadline = time.time() + 30
        while (left := _live_members(pgid)) and time.time() < deadline:
            time.sleep(0.2)
        assert not left, f"processes of {node} outlived it: {left}"

    def stop(self) -> None:
        # `ray start --block` stops the processes it started when it is terminated; workers first
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.time() + 10  # a graceful stop takes Ray ~30 s per node; nothing here needs it
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        for proc in self.procs:  # nothing of any node outlives the test
            if _live_members(proc.pid):
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(self.tmp, ignore_errors=True)


def _live_members(pgid: int) -> list[int]:
    """PIDs of the process group's processes that still run (zombies excluded)."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # state, ppid, pgrp
            live.append(int(stat.parent.name))
    return live


@pytest.fixture(scope="module")
def deployed():
    """The overlay's cluster with two nodes in each worker group (one of each is lost mid-job)."""
    docs = render_kustomize(OVERLAY)
    [raycluster] = [d for d in docs if d["kind"] == "RayCluster"]
    [rayjob] = [d for d in docs if d["kind"] == "RayJob"]
    for g in raycluster["spec"]["workerGroupSpecs"]:
        g["replicas"] = 2
    # Ray declares a silent node dead after health checks fail (default about 30 s); shorter here
    fast_death = {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3", "RAY_health_check_timeout_ms": "1000"}
    cluster = ManifestCluster(raycluster, tempfile.mkdtemp(prefix="rj-", dir="/tmp"), fast_death)  # Ray's unix sockets need a short path
    yield cluster, rayjob
    cluster.stop()


def test_the_rayjob_places_each_actor_on_its_group_and_survives_losing_a_node_of_each(deployed, tmp_path: Path, mlflow_uri: str):
    """The overlay's RayJob (its entrypoint, runtime env and metadata; shortened) through
    `ray job submit`. Once it trains, Ray's state API shows rollout/trainer actors on
    gpu-workers and env/reward/buffer on cpu-workers. Then the node running the policy actors and
    the node running the env, reward and buffer actors are killed whole (raylet, object store,
    actors): Ray restarts the env, reward and buffer actors on the other cpu-workers node, the
    job restarts its policy actors on the other gpu-workers node from its newest checkpoint, and
    finishes every step; the submission carries the run's config and MLflow run id, and the
    MLflow run the Ray job's ids."""
    from mlflow.tracking import MlflowClient
    from ray.job_submission import JobStatus, JobSubmissionClient
    from ray.util.state import list_actors

    cluster, rayjob = deployed
    runs = tmp_path / "runs"
    steps = 8
    env_vars = yaml.safe_load(rayjob["spec"]["runtimeEnvYAML"])["env_vars"]
    runtime_env = {"env_vars": {**env_vars, "MLFLOW_TRACKING_URI": mlflow_uri}}
    # the image's /app is this checkout
    entrypoint = re.sub(r"/app/", f"{REPO}/", rayjob["spec"]["entrypoint"]).split()
    entrypoint = [a for a in entrypoint if not a.startswith("run.output_dir=")]
    cfg_path = entrypoint[entrypoint.index("--config") + 1]
    submission = f"rlsvc-test-{os.getpid()}-{int(time.time())}"
    # --no-wait, then the job's status and logs from the job server: the CLI's log tail is a
    # websocket that a node's loss can break while the job itself goes on
    cmd = [
        *(str(BIN / "ray"), "job", "submit", "--no-wait", "--address", cluster.url, "--submission-id", submission),
        *("--working-dir", str(REPO), "--runtime-env-json", json.dumps(runtime_env)),
        *("--metadata-json", json.dumps(rayjob["spec"]["metadata"]), "--", *entrypoint),
        *(f"run.steps={steps}", "run.checkpoint_every=2", "eval.every_steps=4", "eval.episodes=500", f"run.output_dir={runs}"),
    ]
    out = submit_ray_job(cmd, cluster.env)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    jobs = JobSubmissionClient(cluster.url)

    def trained_steps() -> int:
        ledgers = list(runs.glob("*/trained.jsonl"))
        return sum(1 for line in ledgers[0].read_text().splitlines() if '"step"' in line) if ledgers else 0

    deadline = time.time() + 600
    while trained_steps() < 3 and not jobs.get_job_status(submission).is_terminal() and time.time() < deadline:
        time.sleep(0.5)
    assert jobs.get_job_status(submission) == JobStatus.RUNNING, jobs.get_job_logs(submission)[-4000:]
    info = jobs.get_job_info(submission)

    # where every actor of the plan runs, by its rlsvc name, from Ray's state API
    groups = cluster.node_groups()
    alive = list_actors(address=cluster.url, filters=[("state", "=", "ALIVE")], detail=True, limit=1000, raise_on_missing_output=False)
    actors = {a.name: a for a in alive if a.name and a.job_id == info.job_id}
    placement = planned(load_config(cfg_path))
    seen = set()
    for role in ROLES:
        for i in range(placement[role].count):
            name = actor_name(role, i, placement[role].count)
            assert name in actors, f"{name} not in the state API's actors: {sorted(actors)}"
            group = groups[actors[name].node_id]
            assert group == ("gpu-workers" if role in GPU_GROUP_ROLES else "cpu-workers"), f"{name} ran on {group}"
            seen.add(role)
    assert seen == {r for r in ROLES if placement[r].count}  # the reference lives in trainer rank 0 here

    # the nodes the actors run on now, by the raylets' own names
    nodes = cluster.node_groups(NODE_MARK)
    where = {name: nodes[a.node_id] for name, a in actors.items() if name.startswith("rlsvc-")}
    lost = {where["rlsvc-rollout-0"], where["rlsvc-env-0"]}
    assert lost == {where["rlsvc-trainer-0"], where["rlsvc-buffer"]}, where  # packed: one node per group held them
    for node in lost:
        cluster.kill_node(node)

    deadline = time.time() + 600
    while not jobs.get_job_status(submission).is_terminal() and time.time() < deadline:
        time.sleep(1)
    out = jobs.get_job_logs(submission)
    assert jobs.get_job_status(submission) == JobStatus.SUCCEEDED, out[-4000:]
    said = " ".join(out.split())  # the console wraps long lines
    restart = re.search(r"((?:rlsvc-[\w-]+, )*rlsvc-[\w-]+) died in step \d+ \(\w+\): policy actors restarted from the checkpoint", said)
    assert restart and {"rlsvc-trainer-0", "rlsvc-rollout-0"} <= set(restart[1].split(", ")), out[-4000:]
    [result] = [json.loads(p.read_text()) for p in runs.glob("*/result.json")]
    assert result["steps"] == steps and Path(result["checkpoint"], "config.json").is_file()
    assert result["tracking_uri"] == runtime_env["env_vars"]["MLFLOW_TRACKING_URI"]

    # every actor of the job ran again on the surviving node of its group (Ray restarted the
    # env, reward and buffer actors in place; the job replaced the policy actors)
    nodes = cluster.node_groups(NODE_MARK)  # alive raylets only
    survivors = {node.rsplit("-", 1)[0]: node for node in {"gpu-workers-0", "gpu-workers-1", "cpu-workers-0", "cpu-workers-1"} - lost}
    ran_on: dict[str, set] = {}
    for a in list_actors(address=cluster.url, detail=True, limit=1000, raise_on_missing_output=False):
        if a.name in where and a.job_id == info.job_id:
            ran_on.setdefault(a.name, set()).add(nodes.get(a.node_id))
    for name, node in where.items():
        assert survivors[node.rsplit("-", 1)[0]] in ran_on[name], (name, where, ran_on)

    # the submission carries the run's config and MLflow run id, and the MLflow run the Ray job's ids
    metadata = jobs.get_job_info(submission).metadata
    assert metadata == {
        **rayjob["spec"]["metadata"],
        "rlsvc.mlflow_run_id": result["mlflow_run_id"],
        "rlsvc.config_name": "blackjack_tiny",
        "rlsvc.mlflow_experiment": "blackjack_tiny",
        "rlsvc.config_hash": metadata["rlsvc.config_hash"],
    }, metadata
    tags = MlflowClient(result["tracking_uri"]).get_run(result["mlflow_run_id"]).data.tags
    assert tags["ray.submission_id"] == submission and tags["rlsvc.config_hash"] == metadata["rlsvc.config_hash"]
    assert all(tags[f"ray.submission.{k}"] == v for k, v in rayjob["spec"]["metadata"].items()) and len(tags["ray.job_id"]) == 8
