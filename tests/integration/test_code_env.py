"""CodeInterpreterEnv through OpenEnv's real server and client (the pool the env actors run),
with the local sandbox and with the together backend against the fake service."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
import pytest

from rlsvc.envs.code_interpreter import CodeEnvSettings, pick_task
from rlsvc.envs.openenv_pool import EnvPool, code_spec
from rlsvc.sandbox.fake_together import FakeTogether

pytestmark = pytest.mark.integration
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from reference_solutions import SOLUTIONS  # noqa: E402

KEY = "tk-code-env-test"


def seed_for(kind: str, start: int = 0) -> int:
    return next(s for s in range(start, start + 1000) if pick_task("mixed", s).kind == kind)


def run_checks(pool: EnvPool) -> None:
    arith, prog = seed_for("arithmetic"), seed_for("programming")
    task_a, task_p = pick_task("mixed", arith), pick_task("mixed", prog)
    obs = pool.reset([0, 1, 2, 3], [arith, prog, arith, prog])
    assert obs[0].task == "arithmetic" and obs[1].task == "programming" and obs[0].prompt == task_a.prompt and not obs[0].done

    # turn 1: code in the episode's session (state carries to turn 2), an error, a hostile snippet
    obs = pool.step(
        [0, 1, 2, 3],
        [("code", "x = 6 * 7\nprint(x)"), ("code", "1/0"), ("code", "import os\nwhile True:\n    os.fork()"), ("code", "print('hi')")],
    )
    assert obs[0].stdout == "42\n" and obs[0].exit_code == 0 and obs[0].reward == 0.0 and not obs[0].done
    assert obs[1].error_type == "ZeroDivisionError" and obs[1].error_message == "division by zero" and obs[1].errors == 1
    assert obs[2].timed_out or obs[2].error_type  # ended by its limits, and the server still serves:
    assert obs[3].stdout == "hi\n"

    # turn 2: answers
    right = str(int(task_a.answer))
    obs = pool.step(
        [0, 1, 2, 3],
        [("code", "print(x + 1)"), ("answer", SOLUTIONS[task_p.problem.id]), ("answer", "-1"), ("answer", "def nothing(): pass")],
    )
    assert obs[0].stdout == "43\n"  # the session kept x
    assert obs[1].done and obs[1].outcome == "solved" and obs[1].score == 1.0 and obs[1].reward == pytest.approx(0.9)  # one error earlier
    assert obs[2].done and obs[2].outcome == "wrong" and obs[2].reward == pytest.approx(-0.1 * obs[2].errors)
    assert obs[3].done and obs[3].score == 0.0 and obs[3].outcome == "wrong"
    obs = pool.step([0], [("answer", f"ANSWER: {right}")])
    assert obs[0].done and obs[0].outcome == "solved" and obs[0].reward == 1.0

    # the turn limit ends an episode that never answers
    pool.reset([0], [arith])
    for _ in range(3):
        obs = pool.step([0], [("code", "pass")])
    assert obs[0].done and obs[0].outcome == "turn_limit" and obs[0].turn == 3


def test_local_backend_through_openenv():
    with EnvPool(4, spec=code_spec(CodeEnvSettings(backend="local", max_turns=3, exec_timeout_s=2))) as pool:
        run_checks(pool)


def test_hostile_cells_leave_the_env_serving():
    """The sandbox battery (tests/unit/test_local_sandbox.py) as code actions of live episodes,
    all at once: each ends within its limits and the same server then runs a normal cell."""
    from test_local_sandbox import HOSTILE, sandbox_processes  # tests/unit, put on the path above

    names = list(HOSTILE)
    with EnvPool(len(names), spec=code_spec(CodeEnvSettings(backend="local", max_turns=5, exec_timeout_s=3, memory_mb=256))) as pool:
        ids = list(range(len(names)))
        pool.reset(ids, [seed_for("arithmetic")] * len(names))
        obs = pool.step(ids, [("code", HOSTILE[n]) for n in names])
        for name, o in zip(names, obs):
            assert not o.done and (o.timed_out or o.error_type or o.stdout == "parent done\n"), name
        obs = pool.step(ids, [("code", "print(6 * 7)")] * len(names))
        assert all(o.stdout == "42\n" for o in obs)
    deadline = time.time() + 10  # a killed namespace's processes take a moment to be reaped
    while sandbox_processes() and time.time() < deadline:
        time.sleep(0.1)
    left = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ") for pid in sandbox_processes()}
    assert left == {}


def test_together_backend_through_openenv(monkeypatch):
    monkeypatch.setenv("TOGETHER_API_KEY", KEY)
    with FakeTogether(KEY, timeout_s=2) as url:
        settings = CodeEnvSettings(backend="together", max_turns=3, exec_timeout_s=2, together_base_url=url, attempts=2)
        with EnvPool(4, spec=code_spec(settings)) as pool:
            run_checks(pool)
            # the service fails past the retry cap: that episode ends as failed, the others go on
            pool.reset([0, 1], [seed_for("arithmetic"), seed_for("arithmetic", 100)])
            httpx.post(url.removesuffix("/v1") + "/fake/faults", json={"faults": ["503", "503"]}, trust_env=False)
            obs = pool.step([0], [("code", "print(1)")])
            assert obs[0].done and obs[0].failed and obs[0].outcome == "failed" and "503" in obs[0].failure and KEY not in obs[0].failure
            obs = pool.step([1], [("code", "print(2)")])
            assert obs[0].stdout == "2\n" and not obs[0].failed


def test_hostile_answers_and_cells_cost_only_their_own_episode_over_the_server():
    """Issue 56 through the code environment's OpenEnv server (WebSocket, as `env.transport:
    websocket` or a remote server): a solution returning 10**400, one raising with a lone
    surrogate in its message, and a cell after one that pointed fd 2 at /dev/null; each is scored
    or counted as an error in its own episode, and the episodes beside them play on."""
    prog = seed_for("programming")
    problem = pick_task("mixed", prog).problem
    huge = f"def {problem.entry_point}(*args):\n    return 10**400\n"
    surrogate = "raise ValueError('bad \\ud800 text')\n"  # the harness reads the message back as a literal
    with EnvPool(4, spec=code_spec(CodeEnvSettings(backend="local", max_turns=3, exec_timeout_s=3))) as pool:
        pool.reset([0, 1, 2, 3], [prog, prog, seed_for("arithmetic"), seed_for("arithmetic")])
        obs = pool.step([2, 3], [("code", "import os\nos.dup2(os.open(os.devnull, os.O_WRONLY), 2)"), ("code", "print('hi')")])
        assert obs[0].error_type is None and obs[1].stdout == "hi\n"
        obs = pool.step([0, 1, 2, 3], [("answer", huge), ("answer", surrogate), ("code", "1/0"), ("code", "print('benign')")])
        assert obs[0].done and not obs[0].failed and obs[0].score == 0.0 and obs[0].outcome == "wrong"
        assert obs[1].done and not obs[1].failed and obs[1].score == 0.0
        assert obs[1].error_message == "bad \ufffd text" and obs[1].replaced == 1
        assert obs[2].error_type == "ZeroDivisionError" and obs[2].errors == 1  # the penalty was not switched off
        assert obs[3].stdout == "benign\n" and obs[3].error_type is None
        assert pool.stats()["env_errors"] == 0
