"""A pool of environment sessions (BlackJack, or the code interpreter) served by OpenEnv's real
server and driven by its real client.

`EnvPool` opens one persistent WebSocket session per slot with OpenEnv's async `EnvClient`, either
against a server it starts in its own process (OpenEnv's FastAPI app, `create_app`, under uvicorn
on 127.0.0.1, started by the same code as `python -m rlsvc.envs.serve`) or, given `url=`, against a
server run separately: `rlsvc.envs.serve` in its own container, or a hosted sandbox. OpenEnv's
HTTP /reset and /step build a fresh environment per request, so multi-step episodes must go over
WebSockets.

Sessions live as long as their slot: a reset starts the next episode in the same session, one
message, where a new session would cost a WebSocket handshake and a new environment on the server
(for the code interpreter, a sandbox session too). So a pool never holds more sessions than it has
slots; `close()` ends them, and when the holding process dies the kernel closes its sockets and
the server frees them at once (a standalone server also pings, for hosts that vanish).

A session whose connection fails (the server died, the connection was reset or closed, or no reply
came within `call_timeout_s`) ends only its own episode: `step` returns a `LostObservation` for it
(failed, so the runner drops its group) and the slot is reconnected at its next `reset`, which
retries with exponential backoff and returns a `LostObservation` if the server stays away for
`connect_timeout_s`. A server at its `max_concurrent_envs` is waited on, within the same bound. A
server that answers one session's call with an error (its environment raised, or the observation
would not encode) ends only that episode (`ServerErrorObservation`, failed), never the call.
`stats()` counts all of it for the job's logs.

The server (when in-process) and the clients share one asyncio loop on one background thread: both
sides are pure Python under one GIL, so a second thread would add hand-offs without adding
parallelism. Callers use the blocking batched methods; each call fans out over its sessions at once
(`measure_throughput` reports messages per second). `openenv.core` is imported only when a pool is
built, because the import takes seconds.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import threading
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urlsplit

from rlsvc.envs.serve import bind_socket, check_server, http_url, is_loopback, make_server, new_event_loop, wait_healthy
from rlsvc.rollout.runner import FailedObservation
from rlsvc.task import EnvSpec

T = TypeVar("T")

log = logging.getLogger(__name__)

_HOST = "127.0.0.1"
_MAX_BACKOFF_S = 8.0
# OpenEnv answers a WebSocket it will not hold a session for with one of these errors, then closes it.
_REFUSALS = ("CAPACITY_REACHED", "FACTORY_ERROR", "SESSION_ERROR")


@dataclass
class InvalidObservation(FailedObservation):
    """What a session returns when the environment sent an observation that does not parse as
    its observation type (a buggy environment): the episode ends, failed, and its group is left
    out of training instead of stopping the job."""

    outcome: str = "env_invalid"


@dataclass
class LostObservation(FailedObservation):
    """What a session returns when its connection to the server failed (the server died, the
    connection was reset or closed, no reply in time, no reconnect possible): the episode ends,
    failed, and only its group is left out of training."""

    outcome: str = "env_lost"


@dataclass
class ServerErrorObservation(FailedObservation):
    """What a session returns when the server answered its reset or step with an error (its
    environment raised, or its observation could not be sent): only that episode ends, failed,
    the session stays open for its next reset, and `stats()["env_errors"]` counts it."""

    outcome: str = "env_error"


class SessionRefused(ConnectionError):
    """The server accepted the WebSocket, then refused it a session: it sent an error and closed
    (OpenEnv does so when it is at `max_concurrent_envs`, or when its environment factory fails)."""

    def __init__(self, url: str, code: str, message: str) -> None:
        super().__init__(f"{url} refused a session ({code}: {message})")
        self.code = code

    @property
    def at_capacity(self) -> bool:
        return self.code == "CAPACITY_REACHED"


def blackjack_spec(then_stick_at: int | None = None) -> EnvSpec:
    """BlackJack; with `then_stick_at`, single-turn (stick-at-N finishes every hand)."""
    from rlsvc.envs.blackjack import BlackjackAction, BlackjackEnvironment, BlackjackObservation, BlackjackState

    # The server validates against BlackjackAction; a plain dict skips a model round trip.
    # Passing the class (not a factory) lets OpenEnv check SUPPORTS_CONCURRENT_SESSIONS
    # without building a throwaway instance.
    env = BlackjackEnvironment if then_stick_at is None else BlackjackEnvironment.single_turn(then_stick_at)
    return EnvSpec("blackjack", env, BlackjackAction, BlackjackObservation, BlackjackState, lambda a: {"action": a}, quick_steps=True)


def code_spec(settings: Any) -> EnvSpec:
    from rlsvc.envs.code_interpreter import CodeAction, CodeInterpreterEnvironment, CodeObservation, CodeState

    return EnvSpec(
        "code_interpreter",
        CodeInterpreterEnvironment.configured(settings),
        CodeAction,
        CodeObservation,
        CodeState,
        lambda a: {"kind": a[0], "content": a[1]},
    )


class _HeldSession:
    """The session handling of the pool's OpenEnv client (mixed in ahead of `EnvClient`, which
    is imported only when a pool is built): a connect that makes sure the server holds a session,
    a close that lets the server lead, and an abort for a failed session."""

    _ws: Any
    _ws_url: str
    _connect_timeout: float
    _max_message_size: int

    async def connect(self) -> Any:
        """Open the WebSocket and make sure the server holds a session for it. OpenEnv accepts
        every WebSocket and only then refuses one it has no room for (an error, then close),
        so one "state" request tells a held session from a refused one."""
        from websockets.asyncio.client import connect as ws_connect
        from websockets.exceptions import WebSocketException

        if self._ws is not None:
            return self
        try:
            ws = await ws_connect(
                self._ws_url,
                open_timeout=self._connect_timeout,
                max_size=self._max_message_size,
                # EnvClient.connect edits NO_PROXY around its await instead, which concurrent
                # reconnects would interleave; a loopback server never goes through a proxy.
                proxy=None if is_loopback(self._ws_url) else True,
            )
        except (OSError, WebSocketException) as e:  # refused, reset, timed out, bad handshake
            raise ConnectionError(f"cannot connect to {self._ws_url}: {e}") from e
        try:
            await self._check_held(ws)
        except BaseException:
            ws.transport.abort()
            raise
        self._ws = ws
        return self

    async def _check_held(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            await ws.send(json.dumps({"type": "state"}))
        except ConnectionClosed:
            pass  # refused already; the reason may still be waiting to be read
        try:
            async with asyncio.timeout(self._connect_timeout):
                reply = json.loads(await ws.recv())
        except ConnectionClosed as e:
            raise SessionRefused(self._ws_url, "CLOSED", f"closed at once: {e}") from e
        except TimeoutError as e:
            raise ConnectionError(f"{self._ws_url} did not answer within {self._connect_timeout:g} s") from e
        data = reply.get("data") or {}
        if reply.get("type") == "error" and data.get("code") in _REFUSALS:
            raise SessionRefused(self._ws_url, data["code"], str(data.get("message", "")))

    async def disconnect(self) -> None:
        # OpenEnv 0.3.0's server answers a "close" message by closing the socket itself and
        # logs a traceback when the client's close frame got there first (the base class
        # sends both at once). So ask, then let the server lead the closing handshake.
        from websockets.exceptions import ConnectionClosed

        ws, self._ws = self._ws, None
        if ws is None:
            return
        try:
            await ws.send(json.dumps({"type": "close"}))
        except ConnectionClosed:
            return  # closed by the server or the network already: nothing left to free
        try:
            async with asyncio.timeout(5.0):
                await ws.wait_closed()
        except TimeoutError:
            ws.transport.abort()  # a server that does not answer gets no handshake either

    def abort(self) -> None:
        """Drop the connection at once, without a closing handshake (a failed or silent
        session: the server frees its session when the socket closes)."""
        ws, self._ws = self._ws, None
        if ws is not None:
            ws.transport.abort()


def _make_client_class(spec: EnvSpec) -> type:
    """OpenEnv's `EnvClient` specialised to the served action/observation types."""
    from rlsvc.envs.lazy import openenv_without_web_ui

    with openenv_without_web_ui():
        from openenv.core.client_types import StepResult
        from openenv.core.env_client import EnvClient

    obs_cls, state_cls, payload = spec.observation_cls, spec.state_cls, spec.payload

    class PoolClient(_HeldSession, EnvClient):  # type: ignore[type-arg]
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

    return PoolClient


class EnvPool:
    """`num_sessions` sessions of one environment (default BlackJack), behind a server the pool
    starts in its own process or, with `url`, behind a running OpenEnv server; batched, blocking
    API."""

    def __init__(
        self,
        num_sessions: int,
        *,
        url: str | None = None,
        start_timeout_s: float = 60.0,
        call_timeout_s: float = 60.0,
        step_latency_s: float = 0.0,
        spec: EnvSpec | None = None,
        connect_timeout_s: float = 30.0,
        backoff_s: float = 1.0,
    ) -> None:
        """`url`: a running OpenEnv server for `spec`'s environment (`spec` then only says how to
        parse its messages); None starts one here (within `start_timeout_s`) with room for
        exactly `num_sessions` sessions.

        `connect_timeout_s` bounds every wait for a session, against a server that is full,
        restarting or not answering: construction then raises ConnectionError naming the URL; a
        reset returns a `LostObservation` for that session. Within it, tries are spaced by
        `backoff_s`, twice that, ... (at most 8 s): by default tries at 0, 1, 3, 7, 15, 23 and
        30 s, enough for a server to restart, short enough to give up on one that is gone."""
        if num_sessions < 1:
            raise ValueError(f"num_sessions must be >= 1, got {num_sessions}")
        if connect_timeout_s <= 0 or backoff_s < 0:
            raise ValueError(f"connect_timeout_s must be > 0 and backoff_s >= 0, got {connect_timeout_s}, {backoff_s}")
        from websockets.exceptions import ConnectionClosed

        self.num_sessions = num_sessions
        self.spec = spec or blackjack_spec()
        self._call_timeout_s = call_timeout_s
        self._step_latency_s = step_latency_s
        self._connect_timeout_s = connect_timeout_s
        self._backoff_s = backoff_s
        # What a failed session raises: its connection closed, or (all OSErrors) a reset, a
        # refused or timed-out reconnect, a refused session.
        self._lost_errors: tuple[type[BaseException], ...] = (ConnectionClosed, OSError)
        self._closed = False
        self._server: Any = None
        self._clients: list[Any] = []
        self._broken: set[int] = set()  # slots whose session failed; reconnected at their next reset
        self._stats = dict.fromkeys(("sessions_lost", "reconnects", "env_lost", "capacity_refusals", "env_errors"), 0)
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rlsvc-envpool", daemon=True)
        self._thread.start()
        try:
            if url is None:
                self._start_server(start_timeout_s)
            else:
                self._url = http_url(url)
                self.port = urlsplit(self._url).port
            deadline = time.monotonic() + connect_timeout_s
            if url is not None:
                check_server(self._url, connect_timeout_s)  # one clear error when nobody answers
            client_cls = _make_client_class(self.spec)
            # No per-message timeout: asyncio.wait_for would wrap every reply in a new task;
            # each batched call has one timeout instead (`call_timeout_s`).
            self._clients = [client_cls(base_url=self._url, message_timeout_s=None) for _ in range(num_sessions)]
            self._run(self._open_all(deadline), timeout=connect_timeout_s + 30.0)
        except BaseException:
            self.close()  # frees the sessions already opened
            raise

    # -- public API --------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """HTTP address of the OpenEnv server."""
        return self._url

    def reset(self, session_ids: Sequence[int], seeds: Sequence[int]) -> list[Any]:
        """Start a new episode in each session, from its seed. A session whose connection failed
        (now or in an earlier call) is reconnected, with backoff, for up to `connect_timeout_s`;
        one that cannot be comes back as a `LostObservation` instead of an error."""
        check_batch("EnvPool", self._closed, self.num_sessions, session_ids, seeds)
        deadline = time.monotonic() + self._connect_timeout_s
        timeout = self._connect_timeout_s + self._call_timeout_s
        calls = [self._reset_one(i, int(s), deadline) for i, s in zip(session_ids, seeds, strict=True)]
        return self._run(self._batch(session_ids, calls, timeout), timeout + 30.0)

    def step(self, session_ids: Sequence[int], actions: Sequence[Any]) -> list[Any]:
        """Apply one action in each session ("hit"/"stand"; (kind, content) for code). A session
        whose connection fails, or that does not answer within `call_timeout_s`, comes back as a
        `LostObservation`; the other sessions' results are unaffected."""
        check_batch("EnvPool", self._closed, self.num_sessions, session_ids, actions)
        calls = [self._remote_step(i, a) for i, a in zip(session_ids, actions, strict=True)]
        return self._run(self._batch(session_ids, calls, self._call_timeout_s), self._call_timeout_s + 30.0)

    def stats(self) -> dict[str, int]:
        """Counters since the pool opened, for the job's logs: `sessions_lost` (connections that
        failed or went silent), `reconnects` (lost sessions opened again), `env_lost`
        (`LostObservation`s returned: episodes dropped), `capacity_refusals` (sessions a full server
        refused, then waited for), `env_errors` (calls the server answered with an error: episodes
        dropped) and `open_sessions` (slots holding a live session now)."""
        return {**self._stats, "open_sessions": self.num_sessions - len(self._broken)}

    def close(self) -> None:
        """Close every session, stop the server (if in-process) and the thread. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._clients:
                self._run(_gather([c.close() for c in self._clients]), timeout=30.0)
        finally:
            # Stop the server and the loop even when a session failed to close.
            if self._server is not None and not self._serve_future.done():
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
        # No keep-alive pings: the clients live in this process, so they cannot vanish alone.
        server = make_server(self.spec, self.num_sessions, keepalive_s=None)
        sock = bind_socket(_HOST, 0)
        self.port = sock.getsockname()[1]
        self._url = f"http://{_HOST}:{self.port}"
        self._serve_future = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), self._loop)
        self._server = server  # close() stops it from here on
        try:
            wait_healthy(self._url, timeout_s, exited=self._serve_future.done)
        except RuntimeError:
            self._serve_future.result()  # re-raises the server's start-up error, when it has one
            raise

    def _backoff(self, attempt: int) -> float:
        # never 0: a server that refuses at once must not be asked in a busy loop
        return max(0.05, min(self._backoff_s * 2**attempt, _MAX_BACKOFF_S))

    async def _open_all(self, deadline: float) -> None:
        # Every slot's attempt runs to its end (no gather fail-fast), so none is left connecting
        # after a failure, and close() then frees every session that was opened.
        results = await asyncio.gather(*(self._open(i, deadline) for i in range(self.num_sessions)), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            if isinstance(errors[0], ConnectionError):
                raise ConnectionError(f"{len(errors)} of {self.num_sessions} sessions not opened: {errors[0]}") from errors[0]
            raise errors[0]

    async def _open(self, slot: int, deadline: float) -> None:
        """Open `slot`'s session; while the server is full or does not answer, retry with backoff
        until `deadline`."""
        for attempt in itertools.count():
            try:
                await self._connect(slot)
                return
            except ConnectionError as e:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ConnectionError(f"{e}; gave up after {attempt + 1} tries in {self._connect_timeout_s:g} s") from e
                await asyncio.sleep(min(self._backoff(attempt), left))

    async def _connect(self, slot: int) -> None:
        try:
            await self._clients[slot].connect()
        except SessionRefused as e:
            if e.at_capacity:
                self._stats["capacity_refusals"] += 1
            raise

    async def _reset_one(self, slot: int, seed: int, deadline: float) -> Any:
        """Reset `slot`; a failed session (stale, refused, reset) is reopened with backoff until
        `deadline`, then reported lost."""
        tries = 0
        while True:
            try:
                if slot in self._broken:
                    await self._connect(slot)
                    self._broken.discard(slot)
                    self._stats["reconnects"] += 1
                return (await self._clients[slot].reset(seed=seed)).observation
            except self._lost_errors as e:
                self._lose(slot, e)
                tries += 1
                left = deadline - time.monotonic()
                if left <= 0:
                    return self._lost(f"no session within {self._connect_timeout_s:g} s ({tries} tries): {type(e).__name__}: {e}")
                await asyncio.sleep(min(self._backoff(tries - 1), left))
            except Exception as e:  # the server's error reply (OpenEnv's client raises RuntimeError)
                return self._server_error(slot, "reset", e)

    async def _remote_step(self, slot: int, action: Any) -> Any:
        if slot in self._broken:
            return self._lost("session lost in an earlier call; reset it to reconnect")
        if self._step_latency_s:
            # a simulated remote sandbox: every step waits one round trip; sessions wait
            # concurrently, as independent requests to a remote service would
            await asyncio.sleep(self._step_latency_s)
        try:
            return (await self._clients[slot].step(action)).observation
        except self._lost_errors as e:
            self._lose(slot, e)
            return self._lost(f"{type(e).__name__}: {e}")
        except Exception as e:  # the server's error reply (OpenEnv's client raises RuntimeError)
            return self._server_error(slot, "step", e)

    async def _batch(self, slots: Sequence[int], calls: list[Coroutine[Any, Any, Any]], timeout: float) -> list[Any]:
        """One call per session, all at once. Every call is waited for (a failing one does not
        leave the others' replies in flight); a session silent past `timeout` is dropped and comes
        back lost, since its late reply would be taken for the answer to its next message."""
        if not calls:
            return []
        lost_before = self._stats["sessions_lost"]
        tasks = [asyncio.ensure_future(c) for c in calls]
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        out = []
        for slot, task in zip(slots, tasks, strict=True):
            if task in pending:
                task.cancel()
                self._lose(slot, TimeoutError(f"no reply within {timeout:g} s"))
                out.append(self._lost(f"no reply within {timeout:g} s"))
            else:
                out.append(task.result())
        if self._stats["sessions_lost"] > lost_before:
            log.warning("%d env sessions at %s lost in this call (%s)", self._stats["sessions_lost"] - lost_before, self._url, self.stats())
        return out

    def _lose(self, slot: int, error: BaseException) -> None:
        """Mark `slot`'s session broken and drop its connection; its next reset reconnects it."""
        if slot not in self._broken:
            self._broken.add(slot)
            self._stats["sessions_lost"] += 1
            log.debug("env session %d at %s lost: %s: %s", slot, self._url, type(error).__name__, error)
        self._clients[slot].abort()

    def _server_error(self, slot: int, call: str, error: Exception) -> ServerErrorObservation:
        self._stats["env_errors"] += 1
        log.warning("env session %d at %s: %s answered %s: %s", slot, self._url, call, type(error).__name__, error)
        return ServerErrorObservation(f"{type(error).__name__}: {' '.join(str(error).split())[:300]}")

    def _lost(self, error: str) -> LostObservation:
        self._stats["env_lost"] += 1
        return LostObservation(error)

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        # The batched calls bound their own waits; this timeout is a backstop. If it fires, the
        # sessions' replies may be out of step: close the pool.
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise


def check_batch(pool: str, closed: bool, num_sessions: int, session_ids: Sequence[int], values: Sequence[Any]) -> None:
    """The checks every pool's batched call makes before touching a session."""
    if closed:
        raise RuntimeError(f"{pool} is closed")
    if len(session_ids) != len(values):
        raise ValueError(f"{len(session_ids)} session ids but {len(values)} values")
    if len(set(session_ids)) != len(session_ids):
        # Two messages in flight on one WebSocket would race for each other's replies.
        raise ValueError("session ids in one call must be distinct")
    bad = [i for i in session_ids if not 0 <= i < num_sessions]
    if bad:
        raise IndexError(f"session ids {bad} outside [0, {num_sessions})")


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
