"""OpenEnv's server for one environment, as its own process or inside an env actor.

    python -m rlsvc.envs.serve [--config FILE] [env.type=code ...] --host 127.0.0.1 --port 0 --max-sessions 64 --port-file PATH

runs OpenEnv's FastAPI app (`create_app`) under uvicorn in the foreground, prints one line with
its URL once /health answers, and shuts down gracefully on SIGTERM or SIGINT. Teams run it in
its own container on a CPU pod and train against it with `EnvPool(n, url=...)`.

`bind_socket`, `make_server` and `wait_healthy` are the one start-up path: `EnvPool` uses them
for its in-process server too. `openenv.core` and uvicorn are imported only when a server is
built, because the import takes seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from rlsvc.task import EnvSpec

# A standalone server pings its clients, so that sessions of a client whose host vanished
# without closing its sockets (a lost node, a network partition) are freed after ~2 pings
# instead of holding a slot forever. A dead client *process* needs none of this: the kernel
# closes its sockets and the server frees the session at once.
_KEEPALIVE_S = 20.0
_START_TIMEOUT_S = 120.0
_LOOPBACK = ("127.0.0.1", "localhost", "::1")

log = logging.getLogger(__name__)


def new_event_loop() -> asyncio.AbstractEventLoop:
    # uvloop (a uvicorn[standard] dependency) roughly halves per-message loop overhead.
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def bind_socket(host: str, port: int) -> socket.socket:
    """A bound socket for uvicorn to listen on (port 0: any free port). Binding before the
    server starts gives the caller the port without a race; SO_REUSEADDR lets a restarted
    server take its port back while the old connections sit in TIME_WAIT."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def make_server(spec: EnvSpec, max_sessions: int, *, keepalive_s: float | None, log_level: str = "warning") -> Any:
    """A uvicorn server (not yet started) for OpenEnv's app serving `spec`, which refuses
    sessions beyond `max_sessions`. `keepalive_s`: WebSocket ping interval and timeout (None:
    no pings, for a server whose clients share its process)."""
    import uvicorn

    from rlsvc.envs.lazy import openenv_without_web_ui

    with openenv_without_web_ui():
        from openenv.core.env_server import create_app
    app = create_app(
        spec.env_factory,
        spec.action_cls,
        spec.observation_cls,
        env_name=spec.name,
        max_concurrent_envs=max_sessions,
    )
    config = uvicorn.Config(
        _quiet_lost_clients(app),
        log_level=log_level,
        ws_ping_interval=keepalive_s,
        ws_ping_timeout=keepalive_s,
        # Messages are ~100 bytes: compressing them costs more CPU than it saves.
        ws_per_message_deflate=False,
        backlog=max(2048, max_sessions),
    )
    return uvicorn.Server(config)


def _quiet_lost_clients(app: Any) -> Any:
    """OpenEnv 0.3.0's /ws handler, once its client is gone (a killed process, a dropped session),
    still tries to send an error and close the socket; the disconnect error that raises escapes
    to uvicorn, which would log a traceback for every such session, freed already by then."""
    from starlette.websockets import WebSocketDisconnect, WebSocketDisconnected

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return await app(scope, receive, send)
        try:
            await app(scope, receive, send)
        except (WebSocketDisconnect, WebSocketDisconnected) as e:
            log.debug("WebSocket client %s gone: %r", scope.get("client"), e)

    return asgi


def http_url(url: str) -> str:
    """`url` as the server's HTTP base address (ws:// and wss:// accepted, no trailing slash)."""
    url = url.rstrip("/")
    scheme, sep, rest = url.partition("://")
    if not sep:
        return f"http://{url}"
    return {"ws": "http", "wss": "https"}.get(scheme, scheme) + "://" + rest


def is_loopback(url: str) -> bool:
    return urlsplit(http_url(url)).hostname in _LOOPBACK


def wait_healthy(url: str, timeout_s: float, exited: Callable[[], bool] | None = None) -> None:
    """Poll `url`/health until it answers 200. Raises ConnectionError (one line, naming the URL)
    after `timeout_s`, or RuntimeError as soon as `exited()` says the server has stopped."""
    url = http_url(url)
    # A configured HTTP proxy must not intercept a loopback address; a remote one may need it.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({})) if is_loopback(url) else urllib.request.build_opener()
    deadline = time.monotonic() + timeout_s
    while True:
        if exited is not None and exited():
            raise RuntimeError(f"OpenEnv server at {url} exited during start-up")
        try:
            with opener.open(f"{url}/health", timeout=max(0.1, min(2.0, deadline - time.monotonic()))) as resp:
                if resp.status == 200:
                    return
                last = f"HTTP {resp.status}"
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code}"
        except OSError as e:  # refused, reset, unresolvable, timed out
            last = str(getattr(e, "reason", e))
        if time.monotonic() >= deadline:
            raise ConnectionError(f"no OpenEnv server answering at {url} within {timeout_s:g} s ({last})")
        time.sleep(0.1)


def check_server(url: str, timeout_s: float) -> None:
    """Raise ConnectionError with a one-line message unless an OpenEnv server answers at `url`
    within `timeout_s`: a job checks its env URL before starting any actor."""
    wait_healthy(url, timeout_s)


class _Stopped(Exception):
    """SIGTERM or SIGINT arrived: shut down and return."""


def _stop(signum: int, frame: Any) -> None:
    raise _Stopped(signal.Signals(signum).name)


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    """SIGTERM/SIGINT raise `_Stopped`. While uvicorn serves it takes these signals itself, shuts
    down gracefully (closing every session), then raises the signal again, which lands here."""
    saved = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _write_atomically(path: str, text: str) -> None:
    # A reader polling for the file sees either nothing or the whole port, never a prefix.
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".port-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


async def _run_until_stopped(server: Any, sock: socket.socket, url: str, name: str, port_file: str | None) -> None:
    task = asyncio.create_task(server.serve(sockets=[sock]))
    probe = url.replace("://0.0.0.0:", "://127.0.0.1:")  # a wildcard address is no destination
    try:
        await asyncio.to_thread(wait_healthy, probe, _START_TIMEOUT_S, task.done)
    except RuntimeError:
        await task  # raises the server's own start-up error (or `_Stopped`), when it has one
        raise
    if port_file:
        _write_atomically(port_file, str(sock.getsockname()[1]))
    print(f"OpenEnv {name} server at {url}", flush=True)
    await task


def serve(spec: EnvSpec, host: str, port: int, max_sessions: int, port_file: str | None = None) -> None:
    """Serve `spec` on host:port (0: any free port) with at most `max_sessions` sessions, in the
    foreground, until SIGTERM or SIGINT; then close every session and return. Once /health
    answers, prints one line with the URL and writes the port to `port_file` (atomically)."""
    if max_sessions < 1:
        raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
    with _stop_on_signals():
        try:
            with bind_socket(host, port) as sock:
                url = f"http://{host}:{sock.getsockname()[1]}"
                server = make_server(spec, max_sessions, keepalive_s=_KEEPALIVE_S)
                with asyncio.Runner(loop_factory=new_event_loop) as runner:
                    runner.run(_run_until_stopped(server, sock, url, spec.name, port_file))
        except _Stopped as stop:
            print(f"OpenEnv {spec.name} server stopped ({stop})", flush=True)


def task_spec(config: str | None, overrides: list[str]) -> EnvSpec:
    """The OpenEnv environment of the task a training config names (its `env` section), so the
    server and the job that trains against it agree on the task and its settings."""
    from rlsvc.config import load_config
    from rlsvc.tasks.registry import load_task

    return load_task(load_config(config, overrides).env).env_spec()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rlsvc.envs.serve",
        description="Serve the OpenEnv environment of a task over WebSockets, as its own process. The task "
        "comes from a training config's env section (default: BlackJack), e.g. env.type=code or "
        "env.task=package.module:factory.",
    )
    parser.add_argument("--config", help="training config whose env section names the task (default: the built-in one)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0: any free port (see --port-file)")
    parser.add_argument("--max-sessions", type=int, default=64, help="concurrent sessions; more are refused")
    parser.add_argument("--port-file", help="write the port here (atomically) once the server is healthy")
    parser.add_argument("overrides", nargs="*", metavar="env.key=value", help="config overrides, e.g. env.type=code env.code.backend=local")
    args = parser.parse_args(argv)
    from rlsvc.config import ConfigError
    from rlsvc.task import TaskError

    try:
        spec = task_spec(args.config, args.overrides)
    except (ConfigError, TaskError) as e:
        print(f"rlsvc.envs.serve: {e}", file=sys.stderr)
        return 2
    serve(spec, args.host, args.port, args.max_sessions, args.port_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
