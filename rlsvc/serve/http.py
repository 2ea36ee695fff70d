"""The endpoint over HTTP: a FastAPI app (OpenAI's `/v1/chat/completions`, and the episode routes
agents open and end episodes with) and a uvicorn server in a thread.

    POST /v1/episodes                {"group_id": optional int}  -> {"id": ...}
    POST /v1/chat/completions        OpenAI's body; the episode in the `X-Episode-Id` header
                                     (the client's `extra_headers`) or `episode_id` in the body
                                     (`extra_body`)
    POST /v1/episodes/{id}/end       {"reward": optional float}   -> the episode's summary

Errors are HTTP errors with OpenAI's error body: 404 an unknown episode, 409 one that has ended,
400 a bad request (messages, tool declarations), 401 a missing or wrong API key.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from rlsvc.config import EndpointConfig
from rlsvc.serve.endpoint import Endpoint
from rlsvc.serve.record import EndpointError

EPISODE_HEADER = "X-Episode-Id"


def _error(status: int, message: str) -> JSONResponse:
    kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error", 409: "conflict_error"}
    return JSONResponse({"error": {"message": message, "type": kind.get(status, "server_error"), "code": status}}, status_code=status)


def make_app(endpoint: Endpoint, api_key: str | None = None) -> FastAPI:
    """The FastAPI app over `endpoint`; with `api_key`, every request must carry it.
    (FastAPI reads the routes' annotations by name: `Request` is imported at the top.)"""
    app = FastAPI(title="rlsvc endpoint", docs_url=None, redoc_url=None, openapi_url=None)

    @app.middleware("http")
    async def authorise(request: Request, call_next: Any) -> Any:
        if api_key is not None:
            sent = request.headers.get("authorization", "")
            if not hmac.compare_digest(sent.encode(), f"Bearer {api_key}".encode()):
                return _error(401, "a missing or wrong API key (Authorization: Bearer <endpoint.api_key>)")
        return await call_next(request)

    @app.exception_handler(EndpointError)
    async def refused(request: Request, err: EndpointError) -> Any:
        return _error(err.status, str(err))

    async def body(request: Request) -> dict[str, Any]:
        try:
            data = await request.json() if await request.body() else {}
        except ValueError:
            raise EndpointError("the request body is not JSON") from None
        if not isinstance(data, dict):
            raise EndpointError("the request body is not a JSON object")
        return data

    @app.post("/v1/episodes")
    async def open_episode(request: Request) -> dict[str, Any]:
        group = (await body(request)).get("group_id")
        if group is not None and not isinstance(group, int):
            raise EndpointError("group_id: an integer")
        return {"id": endpoint.open(group)}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict[str, Any]:
        data = await body(request)
        episode = request.headers.get(EPISODE_HEADER) or data.get("episode_id")
        if not episode:
            raise EndpointError(f"no episode: send its id in the {EPISODE_HEADER} header or as episode_id in the body")
        return await run_in_threadpool(endpoint.chat, str(episode), data)

    @app.post("/v1/episodes/{episode_id}/end")
    async def end(episode_id: str, request: Request) -> dict[str, Any]:
        reward = (await body(request)).get("reward")
        if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
            raise EndpointError("reward: a number")
        ep = await run_in_threadpool(endpoint.end, episode_id, reward)
        return {"id": episode_id, "reward": ep.env_return, "calls": len(ep.responses), "invalid": ep.invalid, "outcome": ep.outcome}

    return app


@contextmanager
def serve(endpoint: Endpoint, config: EndpointConfig | None = None) -> Iterator[str]:
    """Serve `endpoint` on `config`'s address in a thread; yields its base URL (`.../v1`, what an
    OpenAI client's `base_url` takes) and stops the server at the end."""
    import uvicorn

    config = config or EndpointConfig()
    key = config.api_key.get_secret_value() if config.api_key is not None else None
    server = uvicorn.Server(uvicorn.Config(make_app(endpoint, key), host=config.host, port=config.port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="rlsvc-endpoint", daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError(f"endpoint: could not listen on {config.host}:{config.port}")
            time.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        host = f"[{config.host}]" if ":" in config.host else config.host
        yield f"http://{host}:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
