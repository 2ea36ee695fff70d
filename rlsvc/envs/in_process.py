"""Sessions of a local OpenEnv environment held as objects in the env actor's own process.

A local environment such as BlackJack is plain Python: a step takes microseconds. Reached through
OpenEnv's server and WebSocket client in the same process (`EnvPool`), each step is a JSON
message each way, a pydantic round trip and an event-loop hop on one GIL: about 0.5 ms per
message, which made env calls a third of a default training step (benchmarks/step_anatomy.py). Here the
pool calls the same `Environment` objects (the classes the server would build, one per session,
from the same `EnvSpec`) directly: `reset(seed=...)` and `step(action)`, with the action built and
validated from the same payload the WebSocket client sends (`EnvSpec.payload` into
`EnvSpec.action_cls`, as the server's `deserialize_action` does).

The API is `EnvPool`'s (`reset`, `step`, `stats`, `close`), so an env actor holds either. The
WebSocket pool stays the transport for remote servers (`env.remote.url`) and for
`env.transport: websocket`.

An environment whose spec says its steps are quick (`EnvSpec.quick_steps`: BlackJack) is called
one session after another in the caller's thread. Any other is stepped as OpenEnv's server steps
it: one that overrides `step_async` is awaited on the pool's event loop (the code interpreter's
hands its sandboxed run to a thread), any other has its `step` run on the pool's threads; all
sessions of a call at once.

An environment that raises ends only its own episode: its session returns a failed observation
(`EnvErrorObservation`), its group is left out, and `stats()["env_errors"]` counts it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rlsvc.envs.openenv_pool import blackjack_spec, check_batch
from rlsvc.envs.serve import new_event_loop
from rlsvc.rollout.runner import FailedObservation

log = logging.getLogger(__name__)


@dataclass
class EnvErrorObservation(FailedObservation):
    """What a session returns when its environment raised: the episode ends, failed."""

    outcome: str = "env_error"


def _overrides(env_cls: Any, name: str) -> bool:
    """True when the environment overrides OpenEnv's default `name` (the server's own test)."""
    from openenv.core.env_server.interfaces import Environment

    return getattr(env_cls, name, None) is not getattr(Environment, name)


def _finished(coro: Coroutine[Any, Any, Any]) -> Any:
    """The result of a coroutine that completes without suspending (a quick environment's
    `reset_async`/`step_async`); one that would suspend is an environment wrongly marked quick."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("an environment marked quick_steps waited inside reset/step; leave quick_steps False for it")


class InProcessPool:
    """`num_sessions` sessions of `spec`'s environment, as objects in this process."""

    def __init__(self, num_sessions: int, *, spec: Any = None, step_latency_s: float = 0.0, max_threads: int = 64) -> None:
        """`spec`: an `EnvSpec` (default BlackJack). `step_latency_s`: a simulated remote round
        trip, waited once per call (the sessions of one call wait together, as concurrent requests
        to a remote service would)."""
        if num_sessions < 1:
            raise ValueError(f"num_sessions must be >= 1, got {num_sessions}")

        self.num_sessions = num_sessions
        self.spec = spec or blackjack_spec()
        self._step_latency_s = step_latency_s
        self._envs: list[Any] = [None] * num_sessions  # built at a session's first reset
        self._async_reset = _overrides(self.spec.env_factory, "reset_async")
        self._async_step = _overrides(self.spec.env_factory, "step_async")
        self._threads = ThreadPoolExecutor(max_workers=min(num_sessions, max_threads), thread_name_prefix="rlsvc-env")
        self._stats = dict.fromkeys(("sessions_lost", "reconnects", "env_lost", "capacity_refusals", "env_errors"), 0)
        self._closed = False
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rlsvc-inprocess-env", daemon=True)
        self._thread.start()

    def reset(self, session_ids: Sequence[int], seeds: Sequence[int]) -> list[Any]:
        """Start a new episode in each session, from its seed."""
        check_batch("InProcessPool", self._closed, self.num_sessions, session_ids, seeds)
        return self._each(self._reset_one, session_ids, [int(s) for s in seeds])

    def step(self, session_ids: Sequence[int], actions: Sequence[Any]) -> list[Any]:
        """Apply one action in each session ("hit"/"stand"; (kind, content) for code)."""
        check_batch("InProcessPool", self._closed, self.num_sessions, session_ids, actions)
        if self._step_latency_s:
            time.sleep(self._step_latency_s)
        return self._each(self._step_one, session_ids, list(actions))

    def stats(self) -> dict[str, int]:
        """`EnvPool.stats`' counters (no connection here: only `env_errors` can move) and
        `open_sessions`."""
        return {**self._stats, "open_sessions": self.num_sessions}

    def close(self) -> None:
        """Close every environment (best effort) and the thread pool. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for env in self._envs:
            if env is not None:
                try:
                    env.close()
                except Exception:  # one environment's cleanup must not keep the others open
                    log.exception("closing an environment failed")
        self._threads.shutdown(wait=True)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30.0)
        self._loop.close()

    def __enter__(self) -> InProcessPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _each(self, fn: Callable[[int, Any], Coroutine[Any, Any, Any]], session_ids: Sequence[int], values: Sequence[Any]) -> list[Any]:
        if self.spec.quick_steps:  # the coroutines finish without waiting: run them right here
            return [_finished(fn(i, v)) for i, v in zip(session_ids, values, strict=True)]

        async def every() -> list[Any]:
            return list(await asyncio.gather(*(fn(i, v) for i, v in zip(session_ids, values, strict=True))))

        return asyncio.run_coroutine_threadsafe(every(), self._loop).result()

    async def _reset_one(self, slot: int, seed: int) -> Any:
        try:
            if self._envs[slot] is None:
                self._envs[slot] = self.spec.env_factory()
            env = self._envs[slot]
            if self._async_reset:
                return await env.reset_async(seed=seed)
            if self.spec.quick_steps:
                return env.reset(seed=seed)
            return await self._loop.run_in_executor(self._threads, lambda: env.reset(seed=seed))
        except Exception as e:
            return self._error(slot, "reset", e)

    async def _step_one(self, slot: int, action: Any) -> Any:
        env = self._envs[slot]
        try:
            if env is None:
                raise RuntimeError("step before the session's first reset")
            act = self.spec.action_cls(**self.spec.payload(action))
            if self._async_step:
                return await env.step_async(act)
            if self.spec.quick_steps:
                return env.step(act)
            return await self._loop.run_in_executor(self._threads, env.step, act)
        except Exception as e:
            return self._error(slot, "step", e)

    def _error(self, slot: int, call: str, error: Exception) -> EnvErrorObservation:
        self._stats["env_errors"] += 1
        log.warning("env session %d: %s raised %s: %s", slot, call, type(error).__name__, error)
        return EnvErrorObservation(f"{type(error).__name__}: {' '.join(str(error).split())[:300]}")
