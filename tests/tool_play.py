"""Playing a tool-calling task's episodes without Ray or vLLM, for the unit tests of
rlsvc/tools/ and the tool tasks: a scripted policy's reply as a rollout worker returns it, and
an in-process env pool behind the rollout runner."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rlsvc.rollout.runner import RolloutRunner

MCP_SERVER = Path(__file__).resolve().parent / "data" / "mcp_lookup_server.py"


# Fixtures for the tool-calling unit tests, which run on both families' chat templates and call
# formats (Qwen3's Hermes-style calls, Llama 3's JSON). A module takes them by assignment,
# `family, tokenizer = tool_play.family, tool_play.tokenizer` (tests/unit/conftest.py cannot
# exist: the unit tests import tests/conftest.py as `conftest`).
@pytest.fixture(scope="module", params=["qwen3", "llama"])
def family(request):
    return request.param


@pytest.fixture(scope="module")
def tokenizer(family):
    from rlsvc.models.hf_tokenizer import build_chat_tokenizer
    from rlsvc.tools.tiny import tool_tokenizer

    return tool_tokenizer(build_chat_tokenizer(family, 720), family)


def sampled(tokenizer: Any, reply: str) -> dict:
    """`reply` as a rollout worker returns it: its tokens ending with eos, logprobs and text."""
    ids = list(tokenizer.encode(reply, add_special_tokens=False)) + [tokenizer.eos_token_id]
    return {"token_ids": ids, "logprobs": [-0.5] * len(ids), "text": tokenizer.decode(ids, skip_special_tokens=True)}


class Fleet:
    """The env fleet's interface over an in-process pool."""

    def __init__(self, pool: Any) -> None:
        self.pool, self.num_slots = pool, pool.num_sessions

    def reset(self, slots, seeds):
        return self.pool.reset(slots, seeds)

    def step(self, slots, actions):
        return self.pool.step(slots, actions)


def play(task: Any, codec: Any, generator: Any, groups: list[tuple[int, int]], sessions: int, max_turns: int, group_size: int = 1):
    """The episodes of `groups` ((group id, seed) pairs) and the pool's stats at the end."""
    from rlsvc.envs.in_process import InProcessPool

    with InProcessPool(sessions, spec=task.env_spec()) as pool:
        runner = RolloutRunner(generator, Fleet(pool), codec, max_turns=max_turns, context="episode")
        return runner.collect(groups, group_size=group_size, version=0, sample_seed=1), pool.stats()


class Recording:
    """The runner's generator over a VLLMEngine, keeping every (prompt, result) it served: what
    the token-in/token-out tests check the episodes against."""

    def __init__(self, engine: Any, max_tokens: int) -> None:
        self.engine, self.max_tokens, self.calls = engine, max_tokens, []

    def generate(self, prompts: Any, seeds: Any) -> Any:
        outs = self.engine.generate(prompts, seeds=seeds, temperature=1.0, max_tokens=self.max_tokens)
        self.calls += list(zip([list(p) for p in prompts], outs))
        return outs


class ScriptedCalculator:
    """A generator for the endpoint's tests (tests/unit/test_endpoint.py): calls `calculate` on
    "What is 2 + 3?" until its prompt holds the tool's result, then answers; keeps every prompt
    and result it served."""

    def __init__(self, family: str, tokenizer) -> None:
        self.family, self.tok, self.served = family, tokenizer, []

    def generate(self, prompts, seeds):
        outs = []
        for p in prompts:
            if "5" in self.tok.decode(p).split("2 + 3")[-1]:  # the tool's result came back
                reply = "The answer is 5."
            elif self.family == "qwen3":
                reply = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "2+3"}}\n</tool_call>'
            else:
                reply = '{"name": "calculate", "parameters": {"expression": "2+3"}}'
            outs.append(sampled(self.tok, reply))
            self.served.append((list(p), outs[-1]))
        return outs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def mcp_server() -> Iterator[tuple[str, subprocess.Popen]]:
    """tests/data/mcp_lookup_server.py on a free port of 127.0.0.1: (its MCP URL, the process),
    stopped by its PID at the end."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(MCP_SERVER), str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(600):  # until it listens (fastmcp's import takes seconds on a loaded machine)
            if proc.poll() is not None:
                raise RuntimeError(proc.stderr.read().decode() if proc.stderr else "the MCP server exited")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


CALCULATOR_WARM_STEPS = 60
_calculator_folders: dict[str, tuple[Path, Any]] = {}


def calculator_folder(family: str, tmp_path_factory: Any) -> tuple[Path, Any]:
    """A tiny `family` folder warm-started on 60 x 8 demonstrated calculator episodes, and its
    held-out parse rate: made once per test session, since the warm start is most of the time of
    both tests that use it (tests/integration/test_tool_rollout.py plays it through vLLM,
    tests/e2e/test_tool_training.py trains a job from it; neither writes into it)."""
    if family not in _calculator_folders:
        from rlsvc.tasks.calculator import CalculatorTask
        from rlsvc.tools.warm_start import make_checkpoint

        folder = tmp_path_factory.mktemp("tools") / family
        _, rate = make_checkpoint(family, folder, CalculatorTask(), steps=CALCULATOR_WARM_STEPS, batch=8, lr=3e-3, held_out=16)
        _calculator_folders[family] = (folder, rate)
    return _calculator_folders[family]


def agent_episode(url: str, task: Any, seed: int, max_turns: int = 3) -> list[dict]:
    """An agent written with the `openai` package plays `task`'s problem `seed` through the
    endpoint at `url`: it sends the task's tools, runs the calls it gets with the task, and ends
    the episode with reward 0. Returns each call's record (the response's `rlsvc` field)."""
    import httpx
    import openai

    client = openai.OpenAI(base_url=url, api_key="local", max_retries=0, timeout=300)
    problem = task.problem(seed)
    episode = httpx.post(f"{url}/episodes", json={"group_id": seed}, timeout=30).json()["id"]
    messages: list[dict] = list(task.prompt(problem))
    records: list[dict] = []
    for _ in range(max_turns):
        reply = client.chat.completions.create(model="policy", messages=messages, tools=task.tools, extra_headers={"X-Episode-Id": episode})
        records.append(reply.model_extra["rlsvc"])
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "content": task.run_call(problem, call.function.name, json.loads(call.function.arguments)),
                }
            )
    httpx.post(f"{url}/episodes/{episode}/end", json={"reward": 0.0}, timeout=30).raise_for_status()
    return records
