"""The `together` backend against a local fake of Together's Code Interpreter on 127.0.0.1 that
speaks its protocol and really runs the code: sessions, output types, failure objects, 429/5xx,
timeouts, retries with backoff and a cap; the API key never leaks into errors or reprs."""

from __future__ import annotations

import httpx
import pytest

from rlsvc.sandbox.fake_together import FakeTogether
from rlsvc.sandbox.together import InterpreterError, RetryPolicy, TogetherInterpreter

KEY = "tk-sentinel-9b1e77"


@pytest.fixture(scope="module")
def fake():
    with FakeTogether(KEY, fault_sleep_s=3.0) as url:
        yield url


def faults(url: str, *names: str) -> None:
    httpx.post(url.removesuffix("/v1") + "/fake/faults", json={"faults": list(names)}, trust_env=False).raise_for_status()


def stats(url: str) -> dict:
    return httpx.get(url.removesuffix("/v1") + "/fake/stats", trust_env=False).json()


@pytest.fixture
def client(fake):
    c = TogetherInterpreter(KEY, fake, timeout_s=1.5, retry=RetryPolicy(attempts=3, backoff_s=0.01, backoff_cap_s=0.05), seed=0)
    yield c
    c.close()


def test_outputs_and_session_reuse(client):
    r, sid = client.execute("x = 20\nprint('hi')\nimport sys\nprint('warn', file=sys.stderr)")
    assert sid and sid.startswith("ses_") and r.stdout == "hi\n" and r.stderr == "warn\n" and r.error is None and r.exit_code == 0
    r, sid2 = client.execute("print(x + 22)", session_id=sid)  # state kept in the session
    assert sid2 == sid and r.stdout == "42\n"
    r, _ = client.execute("print(x)")  # a new session does not see it
    assert r.error == "NameError: name 'x' is not defined" and r.exit_code == 1
    r, _ = client.execute("print('before')\n1/0", session_id=sid)  # a Python error is a result, not a failure
    assert r.stdout == "before\n" and r.error == "ZeroDivisionError: division by zero" and "Traceback" in r.stderr


@pytest.mark.parametrize("fault", ["429", "500", "503", "failed", "timeout"])
def test_transient_failures_are_retried(client, fake, fault):
    before = client.retries
    faults(fake, fault)
    r, _ = client.execute("print('ok')")
    assert r.stdout == "ok\n" and client.retries == before + 1


def test_persistent_failures_stop_at_the_cap_with_one_line(client, fake):
    faults(fake, "503", "429", "500")
    with pytest.raises(InterpreterError, match="failed after 3 attempts: HTTP 500") as err:
        client.execute("print('never')")
    assert KEY not in str(err.value) and KEY not in repr(client)
    r, _ = client.execute("print('after')")  # and the client keeps working
    assert r.stdout == "after\n"


def test_bad_key_and_missing_key(fake, monkeypatch):
    bad = TogetherInterpreter("wrong", fake, retry=RetryPolicy(attempts=2, backoff_s=0.01))
    with pytest.raises(InterpreterError, match="HTTP 401") as err:
        bad.execute("print(1)")
    assert "wrong" not in str(err.value)
    monkeypatch.delenv("TOGETHER_API_KEY", raising=False)
    with pytest.raises(InterpreterError, match="TOGETHER_API_KEY"):
        TogetherInterpreter(base_url=fake)
    monkeypatch.setenv("TOGETHER_API_KEY", KEY)
    monkeypatch.setenv("TOGETHER_BASE_URL", fake)
    env_client = TogetherInterpreter()  # the SDK's variables
    assert env_client.execute("print(7)")[0].stdout == "7\n"


def test_sandboxed_on_the_fake_side_too(client, fake):
    r, _ = client.execute("import socket\nsocket.create_connection(('127.0.0.1', 80), timeout=1)")
    assert r.error and "unreachable" in r.error.lower()
    assert stats(fake)["executions"] >= 1


def test_an_output_flood_is_a_capped_result_not_a_failure(client, fake):
    """A response past the size limit is not read into memory: the run is a result killed for
    its output, as the local sandbox's file-size limit makes it, and nothing is retried."""
    before = client.retries
    faults(fake, "flood")
    r, sid = client.execute("while True:\n    print('x' * 1000)")
    assert r.error.startswith("Killed: output over the 8 MB") and r.exit_code == 1 and r.stdout == "" and sid is None
    assert client.retries == before
    faults(fake, "big")  # 1 MB of stdout: under the response limit, kept up to the local sandbox's cap
    r, sid = client.execute("print('x' * 2**20)")
    assert r.error is None and sid and r.stdout == "x" * 64 * 1024
