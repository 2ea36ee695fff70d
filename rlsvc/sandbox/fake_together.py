"""A local stand-in for Together's Code Interpreter, for tests and demos on 127.0.0.1 only.

It speaks the service's protocol (`POST /v1/tci/execute`, bearer auth, sessions, outputs of type
stdout/stderr/error, failure objects) and really runs the code, in a LocalSandbox. Session state
is kept by replaying a session's earlier cells (their output discarded) before the new one, so
variables and imports carry over as in the real service. Faults are queued through
`POST /fake/faults` (`{"faults": ["429", "500", "503", "timeout", "failed", "flood", "big"]}`;
`flood` and `big`: a success whose stdout is 12 MB or 1 MB), one per request, and
`GET /fake/stats` counts what happened.

    python -m rlsvc.sandbox.fake_together --port 8911 --api-key test-key
"""

# no `from __future__ import annotations`: FastAPI reads the endpoints' annotations at runtime

import argparse
import asyncio
import collections
import secrets
import threading
import time
from typing import Any

from rlsvc.sandbox.local import LocalSandbox, LocalSession, SandboxLimits


def build_app(api_key: str, limits: SandboxLimits | None = None, timeout_s: float = 10.0, fault_sleep_s: float = 30.0):
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI(title="fake Together Code Interpreter")
    box = LocalSandbox(limits)
    sessions: dict[str, LocalSession] = {}
    faults: collections.deque[str] = collections.deque()
    stats: collections.Counter[str] = collections.Counter()

    @app.post("/v1/tci/execute")
    async def execute(request: Request) -> Any:
        stats["requests"] += 1
        if request.headers.get("authorization") != f"Bearer {api_key}":
            stats["unauthorized"] += 1
            return JSONResponse({"error": {"message": "Invalid API key", "type": "invalid_request_error"}}, status_code=401)
        body = await request.json()
        if body.get("language", "python") != "python" or not isinstance(body.get("code"), str):
            return JSONResponse({"error": {"message": "code (string) and language 'python' required"}}, status_code=400)
        if faults:
            fault = faults.popleft()
            stats[f"fault_{fault}"] += 1
            if fault == "timeout":
                await asyncio.sleep(fault_sleep_s)
            elif fault in ("flood", "big"):  # what the service sends for code that prints a lot
                sid = body.get("session_id") or f"ses_{secrets.token_urlsafe(12)}"
                size = 12 * 2**20 if fault == "flood" else 2**20
                return {"data": {"session_id": sid, "status": "success", "outputs": [{"type": "stdout", "data": "x" * size}]}}
            elif fault == "failed":
                return {
                    "data": {"session_id": body.get("session_id"), "status": "failed", "outputs": []},
                    "errors": [{"code": "sandbox_error", "message": "the sandbox crashed"}],
                }
            else:
                return JSONResponse({"error": {"message": f"fault {fault}"}}, status_code=int(fault), headers={"Retry-After": "0"})
        sid = body.get("session_id")
        if sid and sid not in sessions:
            return JSONResponse({"error": {"message": f"session {sid} not found"}}, status_code=404)
        if not sid:
            sid = f"ses_{secrets.token_urlsafe(12)}"
            sessions[sid] = LocalSession(box, timeout_s)
            stats["sessions"] += 1
        result = await asyncio.to_thread(sessions[sid].execute, body["code"])
        stats["executions"] += 1
        outputs = []
        # the real service reports a traceback as an `error` output, apart from stderr
        stderr, sep, trace = result.stderr.partition("Traceback (most recent call last):")
        if result.stdout:
            outputs.append({"type": "stdout", "data": result.stdout})
        if stderr:
            outputs.append({"type": "stderr", "data": stderr})
        if result.error:
            outputs.append({"type": "error", "data": (sep + trace) if sep else result.error})
        return {"data": {"session_id": sid, "status": "success", "outputs": outputs}, "errors": None}

    @app.post("/fake/faults")
    async def queue_faults(request: Request) -> Any:
        faults.extend(str(f) for f in (await request.json())["faults"])
        return {"queued": len(faults)}

    @app.get("/fake/stats")
    async def get_stats() -> Any:
        return dict(stats)

    @app.get("/health")
    async def health() -> Any:
        return {"status": "ok"}

    return app


class FakeTogether:
    """The fake server on 127.0.0.1 in a background thread (`with FakeTogether(key) as url:`)."""

    def __init__(self, api_key: str, port: int = 0, **app_kwargs: Any) -> None:
        import socket

        import uvicorn

        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.server = uvicorn.Server(uvicorn.Config(build_app(api_key, **app_kwargs), log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> str:
        import httpx

        self.thread.start()
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if httpx.get(self.url.removesuffix("/v1") + "/health", timeout=1, trust_env=False).status_code == 200:
                    return self.url
            except httpx.TransportError:
                time.sleep(0.05)
        raise TimeoutError("fake Together server did not start")

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()


def main() -> None:
    import uvicorn

    ap = argparse.ArgumentParser(prog="python -m rlsvc.sandbox.fake_together", description=__doc__)
    ap.add_argument("--port", type=int, default=8911)
    ap.add_argument("--api-key", required=True, help="the bearer token clients must send")
    args = ap.parse_args()
    uvicorn.run(build_app(args.api_key), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
