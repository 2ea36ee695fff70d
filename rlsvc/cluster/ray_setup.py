"""Join the Ray cluster the job was submitted to, or start a local one that is stopped at the end.

Auth mode: rlsvc uses Ray with token auth disabled (`RAY_AUTH_MODE=disabled`) unless the caller
has set RAY_AUTH_MODE. A first plain `ray.init()` may otherwise switch token auth on and write a
token under the home folder, after which `ray job submit` fails with "Missing authentication
token". Clusters that need auth set RAY_AUTH_MODE=token (and the token) for server and clients.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from rlsvc.config import ClusterConfig

# Ray's zero-copy torch serializer, for the actors that send tensors (placement.py
# `TENSOR_ROLES`). Only those get it: a worker with it imports torch as soon as it deserializes
# its first task (Ray registers the serializer then), about 1.7 CPU-seconds that env, reward and
# buffer actors, which never hold a tensor, spent in every job's CPU-bound start-up.
ZERO_COPY_ENV = {"RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": "1"}
# Every rlsvc actor gets these (through its options): the driver sets them before it starts a
# local cluster, whose processes inherit them.
WORKER_ENV = {
    # Actors share cores (2 on a laptop-class box): OpenMP threads that spin after each parallel
    # region steal them from the other actors. Measured with the asynchronous loop, 64 episodes a
    # step: episodes/s 107 -> 127 (sync) and 106 -> 164 (async) with PASSIVE.
    "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
    "TOKENIZERS_PARALLELISM": "false",
    # vLLM logs every in-place weight reload at INFO/WARNING; set VLLM_LOGGING_LEVEL to see them.
    "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "ERROR"),
}


log = logging.getLogger(__name__)
# Set by Ray Jobs for a submitted entrypoint: the submission's runtime env and metadata (with its id).
SUBMISSION_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"


class ClusterUnreachable(RuntimeError):
    pass


@dataclass
class Connection:
    started_locally: bool
    address: str
    dashboard_url: str | None
    job_id: str = ""
    """This driver's Ray job id (hex)."""

    def shutdown(self) -> None:
        import ray

        ray.shutdown()


def check_reachable(address: str, timeout_s: float = 3.0) -> None:
    """Fail fast, in one line, when a `host:port` Ray address does not answer."""
    if address in ("auto", "local"):
        return
    parsed = urlparse(address if "://" in address else f"ray://{address}")
    if parsed.scheme in ("http", "https"):
        return  # a job-server address; `ray job submit` checks that itself
    host, port = parsed.hostname, parsed.port
    if not host or not port:
        return
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as e:
        raise ClusterUnreachable(f"Ray cluster at {address} does not answer ({e.strerror or e})") from e


def submission_metadata() -> dict[str, str]:
    """The metadata `ray job submit` gave this driver (`--metadata-json`, plus Ray's own
    `job_submission_id`); empty when the driver was not submitted through Ray Jobs."""
    try:
        return dict(json.loads(os.environ.get(SUBMISSION_ENV) or "{}").get("metadata") or {})
    except (ValueError, AttributeError):
        return {}


def annotate_submission(metadata: dict[str, str]) -> bool:
    """Add `metadata` to this driver's Ray job submission, where `ray job status`, `ray list jobs`
    and the dashboard's Jobs page show it. The submitter cannot know values the job makes (its
    MLflow run id) and Ray has no public call to change a submission's metadata, so this rewrites
    the submission's record in Ray's internal KV (the store and key its job manager uses), best
    effort: False, with a warning, when not submitted or when that internal layout changed."""
    submission = submission_metadata().get("job_submission_id")
    if not submission:
        return False
    try:
        from ray._private import ray_constants
        from ray.dashboard.modules.job.common import JobInfoStorageClient
        from ray.experimental.internal_kv import _internal_kv_get, _internal_kv_put

        key = JobInfoStorageClient.JOB_DATA_KEY.format(job_id=submission)
        info = json.loads(_internal_kv_get(key, namespace=ray_constants.KV_NAMESPACE_JOB))
        info["metadata"] = {**(info.get("metadata") or {}), **metadata}
        _internal_kv_put(key, json.dumps(info), overwrite=True, namespace=ray_constants.KV_NAMESPACE_JOB)
        return True
    except Exception as e:  # never fail a training job over a label
        log.warning("could not add %s to Ray job submission %s: %s", sorted(metadata), submission, e)
        return False


LOOPBACK_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def keep_local_cluster_on_loopback(cfg: ClusterConfig) -> None:
    """A local cluster is this machine's alone, so all of Ray's servers should listen on
    127.0.0.1. Ray turns a loopback `_node_ip_address` into the routable one; what makes it use
    loopback as the node IP (as on macOS) is this switch, read when Ray is first imported: call
    this before anything imports ray. The trainer's rendezvous and the OpenEnv servers follow
    the node IP."""
    address = cfg.resolved_address()
    if not address or is_loopback(address):
        os.environ.setdefault(LOOPBACK_ONLY_ENV, "0")


def is_loopback(address: str) -> bool:
    """A `host:port` Ray address on this machine's loopback interface. A client must then use
    loopback too: Ray would otherwise rewrite 127.0.0.1 to the routable IP, where nothing listens."""
    host = urlparse(address if "://" in address else f"ray://{address}").hostname
    return host in ("127.0.0.1", "localhost", "::1")


def registration_job_config(metadata: Callable[[], dict[str, str]]):
    """A Ray JobConfig whose `metadata` is called when Ray serializes the config to register the
    driver, which `ray.init` does after it has started a local cluster's processes. So values the
    job makes meanwhile (its MLflow run id, created while Ray starts) still go on the job. Where
    Ray serialized it earlier, the call just waits sooner."""
    from ray.job_config import JobConfig

    pending: Callable[[], dict[str, str]] | None = metadata

    class RegistrationJobConfig(JobConfig):
        def _get_proto_job_config(self):  # every serialization of the config goes through here
            nonlocal pending
            if pending is not None:
                values, pending = pending(), None
                self.metadata.update(values)
                self._cached_pb = None
            return super()._get_proto_job_config()

    return RegistrationJobConfig()


def connect(
    cfg: ClusterConfig, log_to_driver: bool = True, metadata: dict[str, str] | Callable[[], dict[str, str]] | None = None
) -> Connection:
    """Join `cfg`'s cluster or start a local one. `metadata` goes on this driver's Ray job (its
    JobConfig; `ray list jobs --detail` shows it), and on its submission when it was submitted;
    a callable is asked for it once the cluster is up (`registration_job_config`)."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    for k, v in WORKER_ENV.items():
        os.environ.setdefault(k, v)
    import ray

    address = cfg.resolved_address()
    given: dict[str, str] = {}  # this job's own: the config also holds a submission's metadata

    def resolved() -> dict[str, str]:
        given.update(metadata() if callable(metadata) else metadata or {})
        return given

    job_config = registration_job_config(resolved)
    if address:
        check_reachable(address)
        # No runtime_env here: it would replace the one `ray job submit` gave this driver (its
        # working_dir). Actors get their env vars through their own options (placement.py).
        ctx = ray.init(address=address, log_to_driver=log_to_driver, job_config=job_config)
        started = False
    else:
        cpus = cfg.local_num_cpus or max(8, os.cpu_count() or 1)
        metrics_port: dict[str, Any] = {"_metrics_export_port": cfg.metrics_export_port} if cfg.metrics_export_port else {}
        # "local": a cluster of the job's own. Without an address Ray joins the machine's
        # current `ray start` cluster (/tmp/ray/ray_current_cluster) where there is one, and
        # then refuses num_cpus: "When connecting to an existing cluster, num_cpus and num_gpus
        # must not be provided" (a job started beside a `ray start` cluster, one CI run)
        allow_slow_dashboard_start()
        ctx = ray.init(
            address="local",
            num_cpus=cpus,
            resources={cfg.gpu_node_resource: 1.0, cfg.cpu_node_resource: 1.0},
            include_dashboard=cfg.include_dashboard,
            dashboard_host="127.0.0.1",
            log_to_driver=log_to_driver,
            job_config=job_config,
            **metrics_port,
        )
        started = True
    if given:
        annotate_submission(given)
    dashboard = getattr(ctx, "dashboard_url", None)
    return Connection(
        started,
        address or getattr(ctx, "address_info", {}).get("address", "local"),
        f"http://{dashboard}" if dashboard else None,
        ray.get_runtime_context().get_job_id(),
    )


DASHBOARD_STARTUP_TIMEOUT_S = 300


def allow_slow_dashboard_start() -> None:
    """Give a local cluster's dashboard 5 minutes to come up, not Ray's 60 s: past it ray.init
    fails, and on a busy 2-core machine (load 30, one CI run beside other work) the dashboard took
    longer, so the job died before its first actor. Ray reads RAY_DASHBOARD_STARTUP_TIMEOUT_S into
    a module constant when it is imported, before a job's configuration is known, so the constant
    is what is raised (Ray 2.60, pinned); a user's own setting of the variable wins."""
    from ray._private import ray_constants

    if "RAY_DASHBOARD_STARTUP_TIMEOUT_S" not in os.environ:
        ray_constants.RAY_DASHBOARD_STARTUP_TIMEOUT_S = max(ray_constants.RAY_DASHBOARD_STARTUP_TIMEOUT_S, DASHBOARD_STARTUP_TIMEOUT_S)


def enable_zero_copy_tensors() -> None:
    """Ray's zero-copy torch serializer in this worker, as RAY_ENABLE_ZERO_COPY_TORCH_TENSORS=1
    gives a worker that starts with it: for an actor that sets its environment in its
    constructor (actors.py `with_env`), after Ray has made its serialization context. Ray has no
    public switch for a running worker, so this does what its serialization context does at
    start (Ray is pinned to 2.60 in pyproject.toml; tests/integration/test_zero_copy_roles.py
    checks it)."""
    import torch
    from ray._private import ray_constants, tensor_serialization_utils, worker

    ray_constants.RAY_ENABLE_ZERO_COPY_TORCH_TENSORS = True  # contexts made from now on
    context = worker.global_worker.get_serialization_context()
    if not context._zero_copy_tensors_enabled:
        context._register_cloudpickle_reducer(torch.Tensor, tensor_serialization_utils.zero_copy_tensors_reducer)
        context._zero_copy_tensors_enabled = True


def cluster_view() -> tuple[dict[str, float], int]:
    import ray

    return ray.cluster_resources(), len(node_resources())


def node_resources() -> list[dict[str, float]]:
    """Each live node's total resources (CPU, GPU, memory, custom labels)."""
    import ray

    return [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")]
