"""EnvPool against a separately run OpenEnv server (`python -m rlsvc.envs.serve`): same episodes as
in-process, a server killed and restarted, a full server, sessions freed when their holder dies,
and a URL nobody listens on. Every server is a subprocess stopped by its PID; every wait is bounded."""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import SERVER_START_S, StartServer

from rlsvc.envs.blackjack import seeded_game, stick_at

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _play(pool, seeds: list[int], policies: list) -> list[tuple[list[dict], float]]:
    """One full episode per session: (observations seen, final reward) per session."""
    ids = list(range(len(seeds)))
    obs = pool.reset(ids, seeds)
    traces = [[o.model_dump()] for o in obs]
    live = {i: o for i, o in zip(ids, obs) if not o.done}
    while live:
        sids = list(live)
        new = pool.step(sids, [policies[i](live[i]) for i in sids])
        live = {}
        for i, o in zip(sids, new):
            traces[i].append(o.model_dump())
            if not o.done:
                live[i] = o
    return [(t, t[-1]["reward"]) for t in traces]


def _plain_reward(seed: int, policy) -> float:
    game = seeded_game(seed)
    while not game.done:
        game.step(policy(game.view()))
    return game.reward


def test_remote_pool_plays_like_an_in_process_one(start_server: StartServer) -> None:
    from rlsvc.envs.openenv_pool import EnvPool

    proc, url = start_server(max_sessions=4)
    policies = [stick_at(t) for t in (12, 15, 17, 19)]
    with EnvPool(4, url=url, call_timeout_s=30.0) as remote, EnvPool(4, call_timeout_s=30.0) as local:
        assert remote.base_url == url and remote.base_url != local.base_url
        for round_ in range(3):
            seeds = [100 * round_ + i for i in range(4)]
            got = _play(remote, seeds, policies)
            assert got == _play(local, seeds, policies)
            assert [r for _, r in got] == [_plain_reward(s, p) for s, p in zip(seeds, policies)]
        assert remote.stats() == {
            "sessions_lost": 0,
            "reconnects": 0,
            "env_lost": 0,
            "capacity_refusals": 0,
            "env_errors": 0,
            "open_sessions": 4,
        }
    # SIGTERM: a graceful stop, exit status 0
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def test_server_killed_mid_run_then_restarted(start_server: StartServer) -> None:
    from rlsvc.envs.openenv_pool import EnvPool, LostObservation

    proc, url = start_server(max_sessions=4)
    port = int(url.rsplit(":", 1)[1])
    ids, policy = [0, 1, 2, 3], stick_at(17)
    # a short connect timeout: a reset against the dead server gives up after 2 s
    with EnvPool(4, url=url, call_timeout_s=30.0, connect_timeout_s=2.0, backoff_s=0.2) as pool:
        obs = pool.reset(ids, [1, 2, 3, 4])
        assert not any(o.done for o in obs)
        proc.kill()
        proc.wait(timeout=10)

        t0 = time.monotonic()
        lost = pool.step([0, 1], ["hit", "stand"])  # sessions 2 and 3 are not touched
        assert time.monotonic() - t0 < 10
        for o in lost:
            assert isinstance(o, LostObservation)
            assert (o.done, o.failed, o.reward, o.outcome) == (True, True, 0.0, "env_lost")
        assert pool.stats()["sessions_lost"] == 2 and pool.stats()["open_sessions"] == 2

        # Still down: the reset retries, then reports the session lost instead of raising.
        t0 = time.monotonic()
        (down,) = pool.reset([0], [5])
        assert isinstance(down, LostObservation) and "no session within 2 s" in down.error
        assert 2.0 <= time.monotonic() - t0 < 10

        start_server(max_sessions=4, port=port)
        seeds = [10, 11, 12, 13]
        results = _play(pool, seeds, [policy] * 4)  # the reset reconnects every slot
        assert [r for _, r in results] == [_plain_reward(s, policy) for s in seeds]
        stats = pool.stats()
        assert stats["sessions_lost"] == 4 and stats["reconnects"] == 4 and stats["open_sessions"] == 4
        assert stats["env_lost"] == 3


def test_a_full_server_is_waited_on(start_server: StartServer) -> None:
    from rlsvc.envs.openenv_pool import EnvPool

    _, url = start_server(max_sessions=2)
    holder = EnvPool(2, url=url)
    opened: dict[str, Any] = {}

    def open_waiting() -> None:
        try:
            opened["pool"] = EnvPool(2, url=url, connect_timeout_s=60.0, backoff_s=0.2)
        except BaseException as e:  # reported by the assertions below
            opened["error"] = e

    waiter = threading.Thread(target=open_waiting)
    try:
        waiter.start()
        waiter.join(timeout=5.0)
        assert waiter.is_alive() and not opened, "a pool got sessions from a full server"
        holder.close()
        waiter.join(timeout=30.0)
        assert not waiter.is_alive() and "error" not in opened, opened
        with opened["pool"] as waited:
            assert waited.stats()["capacity_refusals"] >= 1
            assert not any(o.done for o in waited.reset([0, 1], [1, 2]))
    finally:
        holder.close()
        waiter.join(timeout=70.0)
        if isinstance(opened.get("pool"), EnvPool):
            opened["pool"].close()

    # More sessions than the server will ever hold: a clear error after the deadline, and the
    # sessions it did open are freed.
    t0 = time.monotonic()
    with pytest.raises(ConnectionError, match="1 of 3 sessions not opened.*CAPACITY_REACHED"):
        EnvPool(3, url=url, connect_timeout_s=3.0, backoff_s=0.2)
    assert time.monotonic() - t0 < 3.0 + 15.0
    with EnvPool(2, url=url, connect_timeout_s=10.0) as again:
        assert again.stats()["capacity_refusals"] == 0


_HOLDER = """
import sys, time
from rlsvc.envs.openenv_pool import EnvPool
pool = EnvPool(int(sys.argv[2]), url=sys.argv[1])
pool.reset(list(range(pool.num_sessions)), list(range(pool.num_sessions)))
print("holding", flush=True)
time.sleep(600)
"""


def _wait_for_line(proc: subprocess.Popen, text: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            line = proc.stdout.readline()
            assert line, f"the child exited ({proc.poll()}) before printing {text!r}"
            if text in line:
                return
    raise AssertionError(f"no {text!r} from the child within {timeout_s} s")


def test_sessions_of_a_killed_holder_are_freed(start_server: StartServer) -> None:
    from rlsvc.envs.openenv_pool import EnvPool

    _, url = start_server(max_sessions=2)
    child = subprocess.Popen([sys.executable, "-c", _HOLDER, url, "2"], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        _wait_for_line(child, "holding", timeout_s=SERVER_START_S)
        with pytest.raises(ConnectionError, match="CAPACITY_REACHED"):
            EnvPool(1, url=url, connect_timeout_s=1.0)  # the child holds every session
        os.kill(child.pid, signal.SIGKILL)  # no close(): only the kernel closes its sockets
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
        child.stdout.close()
    t0 = time.monotonic()
    with EnvPool(2, url=url, connect_timeout_s=15.0, backoff_s=0.2) as pool:
        assert not any(o.done for o in pool.reset([0, 1], [3, 4]))
    assert time.monotonic() - t0 < 15.0


def test_a_url_nobody_listens_on_fails_fast_and_clearly() -> None:
    from rlsvc.envs.openenv_pool import EnvPool, check_server

    with socket.socket() as sock:  # a port that was free a moment ago, with nobody listening
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    t0 = time.monotonic()
    with pytest.raises(ConnectionError) as err:
        check_server(url, timeout_s=1.0)
    assert time.monotonic() - t0 < 5.0
    assert url in str(err.value) and "\n" not in str(err.value)

    t0 = time.monotonic()
    with pytest.raises(ConnectionError, match=re.escape(url)):
        EnvPool(2, url=url, connect_timeout_s=2.0)
    assert time.monotonic() - t0 < 10.0
