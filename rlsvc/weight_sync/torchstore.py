"""TorchStore (meta-pytorch/torchstore) as a transport: `put_state_dict` of each version under
its versioned key on trainer rank 0 (which hosts the store), `get_state_dict` into preallocated
tensors on each rollout worker, then the usual in-place engine load. Used only where an installed
TorchStore works with this Monarch (see availability.py); the processes join Monarch in place,
as for the `monarch` transport.

The two endpoints, run inside trainer rank 0 and each rollout worker; the driver side is
rlsvc/cluster/weight_sync/torchstore.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import torch

from rlsvc.weight_sync.manifest import KEY_PREFIX
from rlsvc.weight_sync.monarch_rdma import join_monarch

STORE = "rlsvc_weights"


class _Loop:
    """TorchStore's API is async; our actors are not. One event loop on a thread per process."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="rlsvc-torchstore", daemon=True).start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=600)


def _key(version: int) -> str:
    """The state dict's key: its tensors are stored as `policy_ver_{v:010d}/{param}`."""
    return f"{KEY_PREFIX}{version:010d}"


class TorchStoreSender:
    """Hosts the store (controller and storage volume) in trainer rank 0's process; the
    controller handle goes to the workers through Ray, which is how TorchStore's own SPMD mode
    shares a store between processes it did not spawn. `node_ip`: this process's node address
    (`join_monarch`)."""

    def __init__(self, publisher: Any, node_ip: str) -> None:
        join_monarch(node_ip)
        self.publisher = publisher
        self.loop = _Loop()
        self.previous: tuple[int, list[str]] | None = None

        async def start():  # noqa: ANN202
            import torchstore as ts
            from monarch.actor import get_or_spawn_controller
            from torchstore.controller import Controller

            await ts.initialize(strategy=ts.ControllerStorageVolumes(), store_name=STORE)
            return await get_or_spawn_controller(STORE, Controller)

        self.controller = self.loop.run(start())

    def info(self) -> Any:
        return self.controller

    def put(self) -> float:
        """put_state_dict of the staged version under its versioned key; the previous one is deleted."""
        import torchstore as ts

        t0 = time.perf_counter()
        m = self.publisher.manifest
        tensors = {s.name: self.publisher.tensor(s.name).detach().contiguous() for s in m.specs}
        self.loop.run(ts.put_state_dict(tensors, _key(m.version), store_name=STORE))
        if self.previous is not None:
            old, names = self.previous
            self.loop.run(ts.delete_batch([f"{_key(old)}/{n}" for n in names] + [f"{_key(old)}/MAPPING"], store_name=STORE))
        self.previous = (m.version, list(tensors))
        return time.perf_counter() - t0

    def close(self) -> None:
        import torchstore as ts

        self.loop.run(ts.shutdown(STORE))


class TorchStoreReceiver:
    def __init__(self, engine: Any, node_ip: str, controller: Any) -> None:
        join_monarch(node_ip)
        self.engine = engine
        self.loop = _Loop()
        self.buffers: dict = {}

        async def connect() -> None:
            import torchstore.api as api
            from torchstore.client import LocalClient

            strategy = await controller.get_controller_strategy.call_one()
            # TorchStore has no public "attach to this store" call; this is what its SPMD mode does
            api._local_clent_map[STORE] = LocalClient(controller=controller, strategy=strategy)

        self.loop.run(connect())

    def pull(self, manifest: Any) -> dict:
        import torchstore as ts

        t0 = time.perf_counter()
        for s in manifest.specs:  # preallocated once: get_state_dict fills them in place
            if s.name not in self.buffers or tuple(self.buffers[s.name].shape) != s.shape:
                self.buffers[s.name] = torch.empty(s.shape, dtype=s.dtype)
        self.engine.begin_update(manifest)
        got = self.loop.run(ts.get_state_dict(_key(manifest.version), user_state_dict=self.buffers, store_name=STORE))
        t1 = time.perf_counter()
        self.engine.load_tensors((s.name, got[s.name]) for s in manifest.specs)
        out = self.engine.finish_update()
        return {**out, "get_s": t1 - t0}

    def close(self) -> None:
        import torchstore as ts

        ts.reset_client(STORE)  # the trainer owns the store
        self.buffers.clear()
