"""TCPStore rendezvous for the process groups rlsvc opens between Ray actors (the trainer ranks'
FSDP group, the broadcast weight-sync group).

The host listens on port 0 and reports the port the OS gave it. Picking a "free" port first and
binding it later leaves a window in which another process (another test's Ray worker, a vLLM
engine) can take it: CI saw exactly that as EADDRINUSE.
"""

from __future__ import annotations

import datetime
from urllib.parse import urlparse

import torch.distributed as dist

TIMEOUT = datetime.timedelta(minutes=5)


def host(ip: str, world: int) -> tuple[dist.TCPStore, str]:
    """The rank-0 store, already listening on this node's address `ip`, and the address the
    other ranks join."""
    store = dist.TCPStore(ip, 0, world, True, timeout=TIMEOUT, wait_for_workers=False)
    return store, f"tcp://{ip}:{store.port}"


def join(address: str, world: int) -> dist.TCPStore:
    url = urlparse(address)
    if url.hostname is None or url.port is None:
        raise ValueError(f"rendezvous address {address!r} is not tcp://HOST:PORT")
    return dist.TCPStore(url.hostname, url.port, world, False, timeout=TIMEOUT)
