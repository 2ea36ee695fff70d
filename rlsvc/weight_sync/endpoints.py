"""The per-process halves of the transports that need state inside the actors (a process group,
registered buffers). Actors hold one endpoint and forward the transport's steps to it
(`ws_snapshot`, `ws_pull`, ...: rlsvc/cluster/actors.py)."""

from __future__ import annotations

from typing import Any


def open_endpoint(kind: str, side: str, owner: Any, *args: Any) -> Any:
    """`owner` is the trainer's WeightPublisher (side="trainer") or the VLLMEngine ("rollout");
    `args` come from the transport's driver side (rlsvc/cluster/weight_sync/), e.g. this node's
    address for the endpoints that listen on it."""
    if kind == "broadcast":
        from rlsvc.weight_sync.broadcast import GlooReceiver, GlooSender

        return (GlooSender if side == "trainer" else GlooReceiver)(owner, *args)
    if kind == "shm":
        from rlsvc.weight_sync.shared_memory import ShmReceiver, ShmSender

        return (ShmSender if side == "trainer" else ShmReceiver)(owner, *args)
    if kind == "shm_adapters":
        from rlsvc.weight_sync.shm_adapters import ShmAdapterReceiver, ShmAdapterSender

        return (ShmAdapterSender if side == "trainer" else ShmAdapterReceiver)(owner, *args)
    if kind == "monarch":
        from rlsvc.weight_sync.monarch_rdma import RdmaReceiver, RdmaSender

        return (RdmaSender if side == "trainer" else RdmaReceiver)(owner, *args)
    if kind == "torchstore":
        from rlsvc.weight_sync.torchstore import TorchStoreReceiver, TorchStoreSender

        return (TorchStoreSender if side == "trainer" else TorchStoreReceiver)(owner, *args)
    raise ValueError(f"no endpoint for weight_sync.type={kind!r}")
