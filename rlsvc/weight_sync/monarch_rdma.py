"""Weights as Monarch RDMA buffers, read by each rollout worker straight from trainer memory.

The bridge between Ray's placement and Monarch: the processes Ray placed (trainer rank 0 and
every rollout worker) each join Monarch in place, as a Monarch proc listening on its node's
address (`enable_transport("tcp://<node ip>:0")` then `context()`: no extra processes are
spawned). Trainer rank 0 registers one `RDMABuffer` per bucket of its flat weight buffer; the
handles (a few hundred bytes each) travel through Ray, and each worker issues every bucket's
`read_into` at once and copies bucket i into its engine while later buckets are still arriving.
The RDMA backend is ibverbs where the NICs have it and tcp elsewhere (this machine: tcp).

Monarch's worker port is unauthenticated: the node address must be on the cluster's private
network (see docs/weight-sync.md).

The two endpoints, run inside trainer rank 0 and each rollout worker; the driver side is
rlsvc/cluster/weight_sync/monarch_rdma.py.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import torch

from rlsvc.weight_sync.manifest import Manifest, views

READ_TIMEOUT_S = 300
_joined = False


def join_monarch(node_ip: str) -> None:
    """Make this (Ray-placed) process a Monarch proc on its node's address `node_ip`; idempotent."""
    global _joined
    if _joined:
        return
    from monarch.actor import context, enable_transport

    # the "tcp" shortcut resolves the hostname and refuses loopback-only hosts; an explicit
    # address also keeps Monarch on the interface Ray uses between nodes.
    # `node_ip` is the address Ray registered for this process's node, looked up by the driver
    # (rlsvc/cluster/weight_sync/base.py, `node_ips`): the value `ray.util.get_node_ip_address()`
    # gives in this process, without importing Ray here. Ray puts no node IP in a worker's
    # environment, and a socket-based guess (the interface of the default route) is wrong on a
    # node whose Ray runs on another interface (`ray start --node-ip-address`, several NICs) or
    # on loopback (a local job, rlsvc/cluster/ray_setup.py): peers on other nodes would dial an
    # address Ray's network does not use.
    enable_transport(f"tcp://{node_ip}:0")
    context()
    _joined = True


def backend() -> str:
    from monarch.rdma import get_rdma_backend

    return str(get_rdma_backend())


class RdmaSender:
    def __init__(self, publisher: Any, node_ip: str) -> None:
        join_monarch(node_ip)
        self.publisher = publisher
        # one registration per (slot, layout): the flat buffers are reused across versions
        self._registered: dict[int, tuple[torch.Tensor, list[Any]]] = {}

    def snapshot(self) -> tuple[list[Any], float]:
        """Pack the staged version into its flat buffer and return the buckets' RDMA handles."""
        from monarch.rdma import RDMABuffer

        t0 = time.perf_counter()
        m: Manifest = self.publisher.manifest
        slot = m.version % 2  # the previous version stays readable while this one is packed
        flat = self.publisher.flat(slot)
        cached = self._registered.get(slot)
        if cached is None or cached[0].data_ptr() != flat.data_ptr() or len(cached[1]) != len(m.buckets):
            if cached is not None:
                for buf in cached[1]:
                    buf.drop().get()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # RDMATcpFallbackWarning: expected without ibverbs
                handles = [RDMABuffer(flat[slice(*m.bucket_bytes(i))]) for i in range(len(m.buckets))]
            self._registered[slot] = (flat, handles)
        return self._registered[slot][1], time.perf_counter() - t0

    def close(self) -> None:
        for _, handles in self._registered.values():
            for buf in handles:
                buf.drop().get()
        self._registered.clear()


class RdmaReceiver:
    def __init__(self, engine: Any, node_ip: str) -> None:
        join_monarch(node_ip)
        self.engine = engine
        self.flat = torch.empty(0, dtype=torch.uint8)

    def pull(self, manifest: Manifest, handles: list[Any]) -> dict[str, float | str]:
        if self.flat.numel() != manifest.total_bytes:
            self.flat = torch.empty(manifest.total_bytes, dtype=torch.uint8)
        self.engine.begin_update(manifest)
        t0 = time.perf_counter()
        reads = [h.read_into(self.flat[slice(*manifest.bucket_bytes(i))], timeout=READ_TIMEOUT_S) for i, h in enumerate(handles)]
        wait_s = 0.0
        for i, (read, bucket) in enumerate(zip(reads, manifest.buckets)):
            t = time.perf_counter()
            read.get()
            wait_s += time.perf_counter() - t
            start = manifest.bucket_bytes(i)[0]
            self.engine.load_tensors(views(self.flat[start:], (manifest.specs[j] for j in bucket), base=start))
        out = self.engine.finish_update()
        return {**out, "transfer_wait_s": wait_s, "pull_s": time.perf_counter() - t0}
