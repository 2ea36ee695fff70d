"""Join the Ray cluster the job was submitted to, or start a local one that is stopped at the end.

Auth mode: rlsvc uses Ray with token auth disabled (`RAY_AUTH_MODE=disabled`) unless the caller
has set RAY_AUTH_MODE. A first plain `ray.init()` may otherwise switch token auth on and write a
token under the home folder, after which `ray job submit` fails with "Missing authentication
token". Clusters that need auth set RAY_AUTH_MODE=token (and the token) for server and clients.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from urllib.parse import urlparse

from rlsvc.config import ClusterConfig

# Every rlsvc actor gets these (through its options), so driver and actors agree.
WORKER_ENV = {
    "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": "1",
    # Actors share cores (2 on a laptop-class box): OpenMP threads that spin after each parallel
    # region steal them from the other actors. Measured with the asynchronous loop, 64 episodes a
    # step: episodes/s 107 -> 127 (sync) and 106 -> 164 (async) with PASSIVE.
    "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
    "TOKENIZERS_PARALLELISM": "false",
    # vLLM logs every in-place weight reload at INFO/WARNING; set VLLM_LOGGING_LEVEL to see them.
    "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "ERROR"),
}


class ClusterUnreachable(RuntimeError):
    pass


@dataclass
class Connection:
    started_locally: bool
    address: str
    dashboard_url: str | None

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


def connect(cfg: ClusterConfig, log_to_driver: bool = True) -> Connection:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    for k, v in WORKER_ENV.items():
        os.environ.setdefault(k, v)
    import ray

    address = cfg.resolved_address()
    if address:
        check_reachable(address)
        # No runtime_env here: it would replace the one `ray job submit` gave this driver (its
        # working_dir). Actors get their env vars through their own options (placement.py).
        ctx = ray.init(address=address, log_to_driver=log_to_driver)
        started = False
    else:
        cpus = cfg.local_num_cpus or max(8, os.cpu_count() or 1)
        ctx = ray.init(
            num_cpus=cpus,
            resources={cfg.gpu_node_resource: 1.0, cfg.cpu_node_resource: 1.0},
            include_dashboard=True,
            log_to_driver=log_to_driver,
            **({"_metrics_export_port": cfg.metrics_export_port} if cfg.metrics_export_port else {}),
        )
        started = True
    dashboard = getattr(ctx, "dashboard_url", None)
    return Connection(started, address or ctx.address_info.get("address", "local"), f"http://{dashboard}" if dashboard else None)


def cluster_view() -> tuple[dict[str, float], int]:
    import ray

    return ray.cluster_resources(), len([n for n in ray.nodes() if n.get("Alive")])
