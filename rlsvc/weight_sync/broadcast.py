"""Weights by a torch.distributed broadcast from trainer rank 0 to every rollout worker.

The group is its own gloo `ProcessGroupGloo` over a TCPStore hosted by the trainer, not the
default group: the trainer ranks already have one (FSDP) and so does each vLLM engine. Each bucket
is one broadcast of a byte range of the flat buffer; a receiver starts bucket i+1 on the wire
before copying bucket i into its engine. NCCL would replace gloo on GPUs.

The two endpoints, run inside trainer rank 0 and each rollout worker; the driver side is
rlsvc/cluster/weight_sync/broadcast.py.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from rlsvc.rendezvous import TIMEOUT, host, join
from rlsvc.weight_sync.manifest import Manifest, views


class GlooSender:
    """Opened in two calls: the store listens first (its address goes to the receivers), then
    `connect` joins the group beside the receivers' own joins (gloo waits for every rank).
    `node_ip`: this process's node address (rlsvc/rendezvous.py)."""

    def __init__(self, publisher: Any, node_ip: str, world: int) -> None:
        self.publisher = publisher
        self.world = world
        self.store, self.address = host(node_ip, world)
        # Any: torch's stubs leave out the broadcast that ProcessGroupGloo binds at run time
        self.pg: Any = None
        self.flat: Any = None  # the staged version's bytes, from `snapshot`

    def info(self) -> str:
        return self.address

    def connect(self) -> bool:
        self.pg = dist.ProcessGroupGloo(self.store, 0, self.world, TIMEOUT)
        return True

    def snapshot(self) -> float:
        """Copy the staged version into the flat buffer (the optimiser may step after this;
        `send` runs on this actor too, so one buffer is enough)."""
        t0 = time.perf_counter()
        self.flat = self.publisher.flat()
        return time.perf_counter() - t0

    def send(self) -> float:
        t0 = time.perf_counter()
        m = self.publisher.manifest
        for i in range(len(m.buckets)):
            start, end = m.bucket_bytes(i)
            self.pg.broadcast(self.flat[start:end], 0).wait()
        return time.perf_counter() - t0


class GlooReceiver:
    def __init__(self, engine: Any, address: str, rank: int, world: int) -> None:
        self.engine = engine
        self.pg: Any = dist.ProcessGroupGloo(join(address, world), rank, world, TIMEOUT)  # broadcast: see GlooSender
        self.flat = torch.empty(0, dtype=torch.uint8)

    def receive(self, manifest: Manifest) -> dict[str, float | str]:
        if self.flat.numel() != manifest.total_bytes:
            self.flat = torch.empty(manifest.total_bytes, dtype=torch.uint8)
        self.engine.begin_update(manifest)
        ranges = [manifest.bucket_bytes(i) for i in range(len(manifest.buckets))]
        pending = self.pg.broadcast(self.flat[ranges[0][0] : ranges[0][1]], 0)
        for i, bucket in enumerate(manifest.buckets):
            pending.wait()
            if i + 1 < len(ranges):  # next bucket on the wire while this one is loaded
                start, end = ranges[i + 1]
                pending = self.pg.broadcast(self.flat[start:end], 0)
            start = ranges[i][0]
            self.engine.load_tensors(views(self.flat[start:], (manifest.specs[j] for j in bucket), base=start))
        return self.engine.finish_update()
