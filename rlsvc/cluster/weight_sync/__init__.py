"""The weight-sync transports as the driver runs them: each calls the trainer ranks' and rollout
workers' `ws_*` methods (rlsvc/cluster/actors.py) through their Ray handles. What runs inside
those actors (endpoints, senders and receivers, the publisher, the manifest) and the `WeightSync`
interface are plain Python, in rlsvc/weight_sync/.

`build_weight_sync` picks a transport by `weight_sync.type`. It lives here, not in base.py, so
that the base never imports its implementations (each implementation imports the base). The
build and each transport's `stage`, `apply` and `push` raise a Ray failure as `ActorDied`
(rlsvc/cluster/errors.py)."""

from __future__ import annotations

from typing import Any

import ray

from rlsvc.cluster.errors import translated
from rlsvc.cluster.weight_sync.base import RayWeightSync
from rlsvc.cluster.weight_sync.broadcast import BroadcastSync
from rlsvc.cluster.weight_sync.monarch_rdma import MonarchSync
from rlsvc.cluster.weight_sync.ray_object_store import RayObjectStoreSync
from rlsvc.cluster.weight_sync.shared_memory import ShmSync
from rlsvc.cluster.weight_sync.shm_adapters import ShmAdapterSync
from rlsvc.cluster.weight_sync.torchstore import TorchStoreSync
from rlsvc.config import LORA_TRANSPORTS
from rlsvc.weight_sync.base import TRANSPORTS, WeightSync, choose_transport, unavailable_reason

TRANSPORT_CLASSES: dict[str, type[RayWeightSync]] = {
    "ray": RayObjectStoreSync,
    "shm": ShmSync,
    "broadcast": BroadcastSync,
    "monarch": MonarchSync,
    "torchstore": TorchStoreSync,
}
"""The driver side of each transport of `weight_sync.type` ("auto" picks one of them)."""


@translated
def build_weight_sync(
    kind: str, trainers: list[Any], rollout_workers: list[Any], bucket_mb: int = 64, verify: bool = True, lora_versions: int | None = None
) -> WeightSync:
    """`lora_versions`: with LoRA, the adapter versions each engine keeps (`buffer.max_staleness + 1`)."""
    if kind == "auto":
        nodes = ray.get([a.node_id.remote() for a in [trainers[0], *rollout_workers]])
        kind = choose_transport(nodes, monarch=unavailable_reason("monarch") is None)
        if lora_versions is not None and kind != "shm":
            kind = "ray"
    if lora_versions is not None and kind == "shm":
        sync: WeightSync = ShmAdapterSync(trainers, rollout_workers, keep=lora_versions, bucket_bytes=bucket_mb << 20, verify=verify)
    elif lora_versions is not None and kind != "ray":
        raise ValueError(f"weight_sync.type={kind} cannot move LoRA adapters (model.lora.enabled); use one of {', '.join(LORA_TRANSPORTS)}")
    else:
        sync = _transport_class(kind)(trainers, rollout_workers, bucket_bytes=bucket_mb << 20, verify=verify)
    sync.kind = kind
    return sync


def _transport_class(kind: str) -> type[RayWeightSync]:
    reason = unavailable_reason(kind)
    if reason:
        raise ValueError(reason)
    if kind not in TRANSPORT_CLASSES:
        raise ValueError(f"weight_sync.type={kind!r} is not a transport (known: {', '.join(TRANSPORTS)})")
    return TRANSPORT_CLASSES[kind]
