"""Weights by a torch.distributed broadcast from trainer rank 0 to every rollout worker.

The group is its own gloo `ProcessGroupGloo` over a TCPStore hosted by the trainer, not the
default group: the trainer ranks already have one (FSDP) and so does each vLLM engine. Each bucket
is one broadcast of a byte range of the flat buffer; a receiver starts bucket i+1 on the wire
before copying bucket i into its engine. NCCL would replace gloo on GPUs.
"""

from __future__ import annotations

import time
from typing import Any

import ray
import torch
import torch.distributed as dist

from rlsvc.cluster.rendezvous import TIMEOUT, host, join
from rlsvc.weight_sync.base import Staged, WeightSync
from rlsvc.weight_sync.manifest import Manifest, views


class GlooSender:
    """Opened in two calls: the store listens first (its address goes to the receivers), then
    `connect` joins the group beside the receivers' own joins (gloo waits for every rank)."""

    def __init__(self, publisher: Any, world: int) -> None:
        self.publisher = publisher
        self.world = world
        self.store, self.address = host(world)
        self.pg: dist.ProcessGroupGloo | None = None
        self.flat: torch.Tensor | None = None

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
        self.pg = dist.ProcessGroupGloo(join(address, world), rank, world, TIMEOUT)
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


class BroadcastSync(WeightSync):
    def __init__(self, trainers: list[Any], rollout_workers: list[Any], **kwargs: Any) -> None:
        super().__init__(trainers, rollout_workers, **kwargs)
        world = 1 + len(rollout_workers)
        address = ray.get(trainers[0].ws_open.remote("broadcast", world))
        ray.get(
            [trainers[0].ws_call.remote("connect")]
            + [w.ws_open.remote("broadcast", address, i + 1, world) for i, w in enumerate(rollout_workers)]
        )

    def stage(self, version: int) -> Staged:
        t0 = time.perf_counter()
        manifest = self._gather(version)
        pack_s = ray.get(self.trainers[0].ws_call.remote("snapshot"))
        return Staged(manifest, [], {"sync/gather_s": manifest.timings["gather_s"], "sync/pack_s": pack_s, "sync/stage_s": time.perf_counter() - t0})

    def apply(self, staged: Staged) -> dict[str, float]:
        t0 = time.perf_counter()
        send = self.trainers[0].ws_call.remote("send")
        results = ray.get([w.ws_call.remote("receive", staged.manifest) for w in self.workers])
        send_s = ray.get(send)
        return {"sync/transfer_s": send_s, "sync/load_s": max(r["load_s"] for r in results), "sync/apply_s": time.perf_counter() - t0}
