"""Weights as Monarch RDMA buffers, read by each rollout worker straight from trainer memory.

The bridge between Ray's placement and Monarch: the processes Ray placed (trainer rank 0 and
every rollout worker) each join Monarch in place, as a Monarch proc listening on its node's
address (`enable_transport("tcp://<node ip>:0")` then `context()`: no extra processes are
spawned). Trainer rank 0 registers one `RDMABuffer` per bucket of its flat weight buffer; the
handles (a few hundred bytes each) travel through Ray, and each worker issues every bucket's
`read_into` at once and copies bucket i into its engine while later buckets are still arriving.
The RDMA backend is ibverbs where the NICs have it and tcp elsewhere (this machine: tcp).

Monarch's worker port is unauthenticated: the node address must be on the cluster's private
network (see DESIGN.md).
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import ray
import torch

from rlsvc.weight_sync.base import Staged, WeightSync
from rlsvc.weight_sync.manifest import Manifest, views

READ_TIMEOUT_S = 300
_joined = False


def join_monarch() -> None:
    """Make this (Ray-placed) process a Monarch proc on its node's address; idempotent."""
    global _joined
    if _joined:
        return
    from monarch.actor import context, enable_transport

    # the "tcp" shortcut resolves the hostname and refuses loopback-only hosts; an explicit
    # address also keeps Monarch on the interface Ray uses between nodes
    enable_transport(f"tcp://{ray.util.get_node_ip_address()}:0")
    context()
    _joined = True


def backend() -> str:
    from monarch.rdma import get_rdma_backend

    return str(get_rdma_backend())


class RdmaSender:
    def __init__(self, publisher: Any) -> None:
        join_monarch()
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
    def __init__(self, engine: Any) -> None:
        join_monarch()
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


class MonarchSync(WeightSync):
    def __init__(self, trainers: list[Any], rollout_workers: list[Any], **kwargs: Any) -> None:
        super().__init__(trainers, rollout_workers, **kwargs)
        ray.get([trainers[0].ws_open.remote("monarch")] + [w.ws_open.remote("monarch") for w in rollout_workers])

    def stage(self, version: int) -> Staged:
        t0 = time.perf_counter()
        manifest = self._gather(version)
        handles, pack_s = ray.get(self.trainers[0].ws_call.remote("snapshot"))
        return Staged(manifest, handles, {"sync/gather_s": manifest.timings["gather_s"], "sync/pack_s": pack_s, "sync/stage_s": time.perf_counter() - t0})

    def apply(self, staged: Staged) -> dict[str, float]:
        t0 = time.perf_counter()
        results = ray.get([w.ws_call.remote("pull", staged.manifest, staged.handles) for w in self.workers])
        return {
            "sync/transfer_s": max(r["pull_s"] - r["load_s"] for r in results),
            "sync/load_s": max(r["load_s"] for r in results),
            "sync/apply_s": time.perf_counter() - t0,
        }
