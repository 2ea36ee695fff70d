"""A pool of environment sessions (BlackJack, or the code interpreter) served by OpenEnv's real
server and driven by its real client.

`EnvPool` starts OpenEnv's FastAPI app (`create_app`) under uvicorn on 127.0.0.1 and opens one
persistent WebSocket session per slot with OpenEnv's async `EnvClient`. OpenEnv's HTTP /reset and
/step build a fresh environment per request, so multi-step episodes must go over WebSockets.

The server and the clients share one asyncio loop on one background thread: both sides are pure
Python under one GIL, so a second thread would add hand-offs without adding parallelism. Callers
use the blocking batched methods; each call fans out over its sessions with `asyncio.gather`
(`measure_throughput` reports messages per second). `openenv.core` is imported only when a pool
is built, because the import takes seconds. After a call times out the sessions' replies may be
out of step: close the pool.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")

_HOST = "127.0.0.1"


def _new_event_loop() -> asyncio.AbstractEventLoop:
    # uvloop (a uvicorn[standard] dependency) roughly halves per-message loop overhead.
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _bind_free_socket(host: str) -> socket.socket:
    """A listening-ready socket on a free port; handing it to uvicorn avoids a port race."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    return sock


@dataclass
class InvalidObservation:
    """What a session returns when the environment sent an observation that does not parse as
    its observation type (a buggy environment): the episode ends, failed, and its group is left
    out of training instead of stopping the job."""

    error: str
    done: bool = True
    reward: float = 0.0
    failed: bool = True
    outcome: str = "env_invalid"
    metadata: dict = field(default_factory=dict)


@dataclass(frozen=True)
class EnvSpec:
    """What the pool serves: OpenEnv's environment factory and types, and how an action (as the
    runner gives it) becomes the step payload. Built in the env actor's process."""

    name: str
    env_factory: Any
    action_cls: type
    observation_cls: type
    state_cls: type
    payload: Callable[[Any], dict[str, Any]]


def blackjack_spec(then_stick_at: int | None = None) -> EnvSpec:
    """BlackJack; with `then_stick_at`, single-turn (stick-at-N finishes every hand)."""
    from rlsvc.envs.blackjack import BlackjackAction, BlackjackEnvironment, BlackjackObservation, BlackjackState

    # The server validates against BlackjackAction; a plain dict skips a model round trip.
    # Passing the class (not a factory) lets OpenEnv check SUPPORTS_CONCURRENT_SESSIONS
    # without building a throwaway instance.
    env = BlackjackEnvironment if then_stick_at is None else BlackjackEnvironment.single_turn(then_stick_at)
    return EnvSpec("blackjack", env, BlackjackAction, BlackjackObservation, BlackjackState, lambda a: {"action": a})


def code_spec(settings: Any) -> EnvSpec:
    from rlsvc.envs.code_interpreter import CodeAction, CodeInterpreterEnvironment, CodeObservation, CodeState

    return EnvSpec("code_interpreter", CodeInterpreterEnvironment.configured(settings), CodeAction, CodeObservation, CodeState,
                   lambda a: {"kind": a[0], "content": a[1]})


def _make_client_class(spec: EnvSpec) -> type:
    """OpenEnv's `EnvClient` specialised to the served action/observation types."""
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient

    obs_cls, state_cls, payload = spec.observation_cls, spec.state_cls, spec.payload

    class PoolClient(EnvClient):  # type: ignore[type-arg]
        def _step_payload(self, action: Any) -> dict[str, Any]:
            return payload(action)

        def _parse_result(self, result: dict[str, Any]) -> StepResult:
            try:
                obs = obs_cls(**result["observation"], reward=result.get("reward"), done=result["done"])
            except (ValueError, TypeError, KeyError) as e:  # pydantic's ValidationError is a ValueError
                bad = InvalidObservation(f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
                return StepResult(observation=bad, reward=0.0, done=True)
            return StepResult(observation=obs, reward=obs.reward, done=obs.done)

        def _parse_state(self, result: dict[str, Any]) -> Any:
            return state_cls(**result)

        async def disconnect(self) -> None:
            # OpenEnv 0.3.0's server answers a "close" message by closing the socket itself and
            # logs a traceback when the client's close frame got there first (the base class
            # sends both at once). So ask, then let the server lead the closing handshake.
            ws, self._ws = self._ws, None
            if ws is None:
                return
            await ws.send(json.dumps({"type": "close"}))
            try:
                await asyncio.wait_for(ws.wait_closed(), timeout=5.0)
            except TimeoutError:
                await ws.close()

    return PoolClient


class EnvPool:
    """`num_sessions` sessions of one environment (default BlackJack) behind OpenEnv's server;
    batched, blocking API."""

    def __init__(
        self,
        num_sessions: int,
        *,
        start_timeout_s: float = 60.0,
        call_timeout_s: float = 60.0,
        step_latency_s: float = 0.0,
        spec: EnvSpec | None = None,
    ) -> None:
        if num_sessions < 1:
            raise ValueError(f"num_sessions must be >= 1, got {num_sessions}")
        self.num_sessions = num_sessions
        self.spec = spec or blackjack_spec()
        self._call_timeout_s = call_timeout_s
        self._step_latency_s = step_latency_s
        self._closed = False
        self._clients: list[Any] = []
        self._loop = _new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rlsvc-envpool", daemon=True)
        self._thread.start()
        try:
            self._start_server(start_timeout_s)
            self._clients = self._run(self._connect_all(), timeout=start_timeout_s)
        except BaseException:
            self.close()
            raise

    # -- public API --------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """HTTP address of the OpenEnv server."""
        return f"http://{_HOST}:{self.port}"

    def reset(self, session_ids: Sequence[int], seeds: Sequence[int]) -> list[Any]:
        """Start a new episode in each session, from its seed."""
        self._check_batch(session_ids, seeds)
        clients = [self._clients[i] for i in session_ids]
        calls = [c.reset(seed=int(s)) for c, s in zip(clients, seeds, strict=True)]
        return [r.observation for r in self._run(_gather(calls), self._call_timeout_s)]

    def step(self, session_ids: Sequence[int], actions: Sequence[Any]) -> list[Any]:
        """Apply one action in each session ("hit"/"stand"; (kind, content) for code)."""
        self._check_batch(session_ids, actions)
        clients = [self._clients[i] for i in session_ids]
        calls = [self._remote_step(c, a) for c, a in zip(clients, actions, strict=True)]
        return [r.observation for r in self._run(_gather(calls), self._call_timeout_s)]

    async def _remote_step(self, client: Any, action: str) -> Any:
        if self._step_latency_s:
            # a simulated remote sandbox: every step waits one round trip; sessions wait
            # concurrently, as independent requests to a remote service would
            await asyncio.sleep(self._step_latency_s)
        return await client.step(action)

    def close(self) -> None:
        """Close every session, stop the server and its thread. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._clients:
                self._run(_gather([c.close() for c in self._clients]), timeout=30.0)
        finally:
            # Stop the server and the loop even when a session failed to close.
            if getattr(self, "_server", None) is not None and not self._serve_future.done():
                self._server.should_exit = True
                self._serve_future.result(timeout=30.0)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30.0)
            self._loop.close()

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _start_server(self, timeout_s: float) -> None:
        import uvicorn
        from openenv.core.env_server import create_app

        spec = self.spec
        app = create_app(
            spec.env_factory,
            spec.action_cls,
            spec.observation_cls,
            env_name=spec.name,
            max_concurrent_envs=self.num_sessions,
        )
        sock = _bind_free_socket(_HOST)
        self.port: int = sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            log_level="warning",
            # Local, short-lived connections: keep-alive pings would only add traffic.
            ws_ping_interval=None,
            # Messages are ~100 bytes: compressing them costs more CPU than it saves.
            ws_per_message_deflate=False,
            backlog=max(2048, self.num_sessions),
        )
        self._server = uvicorn.Server(config)
        self._serve_future = asyncio.run_coroutine_threadsafe(self._server.serve(sockets=[sock]), self._loop)
        self._wait_healthy(timeout_s)

    def _wait_healthy(self, timeout_s: float) -> None:
        # No proxy handler: a configured HTTP proxy must not intercept 127.0.0.1.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + timeout_s
        while True:
            if self._serve_future.done():
                self._serve_future.result()  # re-raises the server's start-up error
                raise RuntimeError("OpenEnv server exited during start-up")
            try:
                with opener.open(f"{self.base_url}/health", timeout=2.0) as resp:
                    if resp.status == 200:
                        return
            except OSError as err:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"OpenEnv server not healthy at {self.base_url}") from err
            time.sleep(0.05)

    async def _connect_all(self) -> list[Any]:
        client_cls = _make_client_class(self.spec)
        clients = [
            # No per-message timeout: asyncio.wait_for would wrap every reply in a new task;
            # each batched call has one timeout instead (`call_timeout_s`).
            client_cls(base_url=self.base_url, message_timeout_s=None)
            for _ in range(self.num_sessions)
        ]
        # EnvClient.connect adds localhost to NO_PROXY around its await and restores it after;
        # concurrent connects would interleave those edits, so hold the value steady meanwhile.
        saved = os.environ.get("NO_PROXY")
        os.environ["NO_PROXY"] = f"{saved},localhost,127.0.0.1" if saved else "localhost,127.0.0.1"
        try:
            await asyncio.gather(*(c.connect() for c in clients))
        finally:
            if saved is None:
                os.environ.pop("NO_PROXY", None)
            else:
                os.environ["NO_PROXY"] = saved
        return clients

    def _check_batch(self, session_ids: Sequence[int], values: Sequence[Any]) -> None:
        if self._closed:
            raise RuntimeError("EnvPool is closed")
        if len(session_ids) != len(values):
            raise ValueError(f"{len(session_ids)} session ids but {len(values)} values")
        if len(set(session_ids)) != len(session_ids):
            # Two messages in flight on one WebSocket would race for each other's replies.
            raise ValueError("session ids in one call must be distinct")
        bad = [i for i in session_ids if not 0 <= i < self.num_sessions]
        if bad:
            raise IndexError(f"session ids {bad} outside [0, {self.num_sessions})")

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise


async def _gather(calls: Sequence[Coroutine[Any, Any, T]]) -> list[T]:
    return list(await asyncio.gather(*calls))


def measure_throughput(num_sessions: int = 256, rounds: int = 20) -> tuple[float, float]:
    """Messages (reset + step) per wall second and per CPU second of this process, over
    `rounds` of hit-until-17 episodes in every session. The CPU rate is what a dedicated core
    would reach; on a shared machine the wall rate can be far lower."""
    from rlsvc.envs.blackjack import stick_at

    policy = stick_at(17)
    with EnvPool(num_sessions) as pool:
        ids = list(range(num_sessions))
        messages, wall, cpu = 0, time.perf_counter(), time.process_time()
        for r in range(rounds):
            obs = pool.reset(ids, [r * num_sessions + i for i in ids])
            live = dict(zip(ids, obs, strict=True))
            messages += num_sessions
            while live:
                sids = list(live)
                new = pool.step(sids, [policy(live[i]) for i in sids])
                messages += len(sids)
                live = {i: o for i, o in zip(sids, new, strict=True) if not o.done}
        return messages / (time.perf_counter() - wall), messages / (time.process_time() - cpu)


if __name__ == "__main__":
    per_wall, per_cpu = measure_throughput()
    print(f"256 sessions: {per_wall:.0f} messages/s wall, {per_cpu:.0f} messages per CPU-second")
