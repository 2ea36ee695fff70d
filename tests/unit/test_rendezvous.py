"""The process-group rendezvous: the host's store is already listening on the port it reports,
so nothing can take that port between choosing and binding it (the race CI once lost)."""

from __future__ import annotations

import socket

from rlsvc.rendezvous import host, join


def test_the_reported_port_is_the_listening_store():
    store, address = host("127.0.0.1", world=2)
    ip, port = address.removeprefix("tcp://").rsplit(":", 1)
    with socket.socket() as s:  # the port is taken by the store itself
        try:
            s.bind((ip, int(port)))
            bound = True
        except OSError:
            bound = False
    assert not bound
    client = join(address, world=2)
    client.set("from-rank-1", "hello")
    assert store.get("from-rank-1") == b"hello"
