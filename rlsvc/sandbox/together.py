"""Together's Code Interpreter (TCI) as a sandbox backend: `POST {base}/tci/execute`.

Request `{"code", "language": "python", "session_id"?}`; response
`{"data": {"session_id", "status", "outputs": [{"type": "stdout"|"stderr"|"error"|..., "data"}]},
"errors": ...}`. Reusing the returned `session_id` keeps the interpreter's state between calls,
so an episode opens one session and runs every turn in it. A Python exception comes back as an
output of type `error` (a result, not a failure); a failure is an HTTP 429/5xx, a timeout, a
dropped connection, or a response whose `errors` is set or whose status is `failed`: those are
retried with exponential backoff (honouring Retry-After) up to a cap, then `InterpreterError`.

Configuration follows the `together` SDK: `TOGETHER_API_KEY`, and `TOGETHER_BASE_URL` (default
https://api.together.xyz/v1). The key is sent only in the Authorization header and never appears
in an exception message, a log line or a repr.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass

import httpx

from rlsvc.sandbox.local import OUTPUT_LIMIT, SandboxResult

DEFAULT_BASE_URL = "https://api.together.xyz/v1"
RETRIABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
MAX_RESPONSE_BYTES = 8 * 2**20
"""A response body past this is not read: the code flooded its output (the local sandbox's
file-size limit, 8 MB, is the same bound); stdout and stderr kept are capped as the local ones."""


class InterpreterError(RuntimeError):
    """The interpreter service did not answer usably within the retry budget."""


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    """Tries per call, the first included."""
    backoff_s: float = 0.5
    """First wait; doubles each retry, with jitter."""
    backoff_cap_s: float = 8.0
    """Longest single wait (a Retry-After header above it is capped too)."""


class TogetherInterpreter:
    """Blocking client for TCI; thread-safe (one httpx.Client with a connection pool)."""

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        seed: int | None = None,
    ) -> None:
        key = api_key or os.environ.get("TOGETHER_API_KEY")
        if not key:
            raise InterpreterError("the together backend needs TOGETHER_API_KEY in the environment")
        self.base_url = (base_url or os.environ.get("TOGETHER_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self.retry = retry or RetryPolicy()
        self._rng = random.Random(seed)
        self._http = httpx.Client(
            base_url=self.base_url, timeout=timeout_s, headers={"Authorization": f"Bearer {key}"}, trust_env=False
        )  # no proxy from the environment for a key-bearing client
        self.retries = 0
        """Retried calls so far (a metric)."""

    def __repr__(self) -> str:
        return f"TogetherInterpreter(base_url={self.base_url!r})"

    def execute(self, code: str, session_id: str | None = None) -> tuple[SandboxResult, str | None]:
        """Run `code` (in `session_id` if given); returns the result and the session to reuse."""
        body: dict = {"code": code, "language": "python"}
        if session_id:
            body["session_id"] = session_id
        last = "no attempt"
        for attempt in range(self.retry.attempts):
            if attempt:
                self.retries += 1
            t0 = time.perf_counter()
            try:
                with self._http.stream("POST", "/tci/execute", json=body) as resp:
                    raw = _read_capped(resp, MAX_RESPONSE_BYTES)
            except httpx.TimeoutException:
                last, wait = "timed out", None
            except httpx.TransportError as e:
                last, wait = f"connection failed ({type(e).__name__})", None
            else:
                if resp.status_code == 200 and raw is None:  # the code's output flood: a result, like the local limit
                    flood = f"Killed: output over the {MAX_RESPONSE_BYTES // 2**20} MB response limit"
                    return SandboxResult("", "", 1, False, flood, time.perf_counter() - t0), session_id
                if resp.status_code == 200:
                    payload = json.loads(raw or b"{}")
                    data = payload.get("data") or {}
                    if not payload.get("errors") and data.get("status") != "failed":
                        return _result(data, time.perf_counter() - t0), data.get("session_id") or session_id
                    last, wait = f"failure response: {_brief(payload.get('errors'))}", None
                elif resp.status_code in RETRIABLE_STATUS:
                    last, wait = f"HTTP {resp.status_code}", _retry_after(resp)
                else:  # 4xx other than the above: our request is wrong, retrying cannot help
                    text = (raw or b"").decode("utf-8", "replace")
                    raise InterpreterError(f"Code Interpreter refused the request: HTTP {resp.status_code} {_brief(text)}")
            if attempt + 1 < self.retry.attempts:
                time.sleep(self._backoff(attempt, wait))
        raise InterpreterError(f"Code Interpreter failed after {self.retry.attempts} attempts: {last}")

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        base = min(self.retry.backoff_cap_s, self.retry.backoff_s * 2**attempt)
        wait = base * (0.5 + self._rng.random() / 2)  # jitter: concurrent sessions do not retry in step
        return min(self.retry.backoff_cap_s, max(wait, retry_after or 0.0))

    def close(self) -> None:
        self._http.close()


def _read_capped(resp: httpx.Response, limit: int) -> bytes | None:
    """The response body, or None past `limit` bytes (read no further: the rest is dropped)."""
    chunks, size = [], 0
    for chunk in resp.iter_bytes():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _retry_after(resp: httpx.Response) -> float | None:
    try:
        return float(resp.headers["retry-after"])
    except (KeyError, ValueError):
        return None


def _brief(value: object) -> str:
    return str(value)[:200]


def _result(data: dict, elapsed: float) -> SandboxResult:
    stdout, stderr, errors = [], [], []
    for out in data.get("outputs") or []:
        kind, text = out.get("type"), out.get("data")
        text = text if isinstance(text, str) else str(text)
        if kind == "stdout":
            stdout.append(text)
        elif kind == "stderr":
            stderr.append(text)
        elif kind == "error":
            errors.append(text)
    error = None
    if errors:
        # the last line of a traceback is "Type: message"
        lines = [ln for ln in "\n".join(errors).strip().splitlines() if ln.strip()]
        error = lines[-1].strip()[:500] if lines else "error"
        stderr.append("\n".join(errors))
    # the same caps as the local sandbox's
    return SandboxResult("".join(stdout)[:OUTPUT_LIMIT], "".join(stderr)[:OUTPUT_LIMIT], 1 if errors else 0, False, error, elapsed)
