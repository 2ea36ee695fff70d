"""An MCP tool server as an environment: its tools, listed through MCP, are the policy's tools,
and each call the policy makes is an MCP `tools/call` from the environment's step.

`McpToolTask(url, problems)`: `url` is the server's streamable-HTTP endpoint (e.g.
`http://127.0.0.1:8000/mcp`, a server written with `fastmcp` or the `mcp` SDK); `problems` a
JSONL file of `{"question": ..., "answer": ...}` rows (reset with seed s deals row s mod N;
a row may also carry a demonstrated `"call": {"name": ..., "arguments": {...}}`, which the tool
warm start, rlsvc/tools/warm_start.py, teaches with the row's answer after it); the policy answers in a reply without calls, and the answer scores 1 when its last word (trimmed of
punctuation, any case) is the row's `answer`. The MCP client is `fastmcp`'s.

- The tools are listed once per process, on first use (in the driver when the job checks the
  task, before any cluster starts): a server that does not answer is one line naming
  `env.options.url`; tool schemas are checked like any task's (rlsvc/tools/schema.py).
- Each call opens its own MCP session (the tools are stateless calls; a server whose tools keep
  state across an episode's calls is not served by this task yet). A tool's error (`isError`)
  goes back to the policy as the tool's message; a call that cannot reach the server fails its
  episode (`ToolServerLost`: the group is left out of the step, as for any environment error).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from rlsvc.task import TaskError
from rlsvc.tools.schema import ToolCall, ToolReply
from rlsvc.tools.task import ToolServerLost, ToolTask

T = TypeVar("T")
CALL_TIMEOUT_S = 60.0


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to the end from synchronous code, also when this thread runs an event loop
    (an OpenEnv server's): then on a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def _list_tools(url: str, timeout_s: float) -> list[dict[str, Any]]:
    from fastmcp import Client

    async with Client(url, timeout=timeout_s, init_timeout=timeout_s) as client:
        tools = await client.list_tools()
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description or "", "parameters": t.input_schema}} for t in tools
    ]


async def _call_tool(url: str, name: str, arguments: dict[str, Any], timeout_s: float) -> str:
    from fastmcp import Client

    try:
        async with Client(url, timeout=timeout_s, init_timeout=timeout_s) as client:
            result = await client.call_tool(name, arguments, raise_on_error=False)
    except Exception as e:  # no session, no reply: the server, not the call, failed
        raise ToolServerLost(f"MCP server {url}: {type(e).__name__}: {e}") from e
    text = "\n".join(getattr(block, "text", "") or json.dumps(block.model_dump(mode="json")) for block in result.content)
    if result.is_error:
        raise RuntimeError(text)
    return text


class McpToolTask(ToolTask):
    name = "mcp"
    quick_steps = False  # every call is a round trip to the server

    def __init__(self, url: str, problems: str, system: str | None = None, tool_parser: str = "auto", timeout_s: float = 10.0) -> None:
        self.url, self.system, self.tool_parser, self.timeout_s = url, system, tool_parser, timeout_s
        try:
            rows = [json.loads(line) for line in Path(problems).read_text().splitlines() if line.strip()]
        except (OSError, ValueError) as e:
            raise TaskError(f"env.options.problems: cannot read {problems}: {e}") from None
        if not rows or not all(isinstance(r, dict) and "question" in r and "answer" in r for r in rows):
            raise TaskError(f"env.options.problems: {problems} needs rows with question and answer")
        self.problems = rows
        self._tools: list[dict[str, Any]] | None = None

    @property
    def tools(self) -> list[dict[str, Any]]:  # type: ignore[override]  # listed lazily: a property over the base's attribute
        """The server's tools as OpenAI function tools, listed through MCP once per process."""
        if self._tools is None:
            try:
                self._tools = run_sync(_list_tools(self.url, self.timeout_s))
            except Exception as e:  # any failure to reach or read the server is the same refusal
                raise TaskError(f"env.options.url: the MCP server at {self.url} does not answer ({type(e).__name__}: {e})") from None
        return self._tools

    def prompt(self, problem: dict[str, Any]) -> list[dict[str, str]]:
        system = [{"role": "system", "content": self.system}] if self.system else []
        return [*system, {"role": "user", "content": str(problem["question"])}]

    def call(self, problem: Any, name: str, arguments: dict[str, Any]) -> str:
        return run_sync(_call_tool(self.url, name, arguments, CALL_TIMEOUT_S))

    def demonstration(self, problem: dict[str, Any]) -> ToolReply | None:
        """The row's demonstrated call, if it has one."""
        call = problem.get("call")
        return ToolReply("", (ToolCall(call["name"], dict(call.get("arguments", {}))),)) if call else None

    def final_answer(self, problem: dict[str, Any]) -> str | None:
        return str(problem["answer"]) if problem.get("call") else None

    def score(self, problem: dict[str, Any], answer: str) -> float:
        words = answer.split()
        return float(bool(words) and re.sub(r"^\W+|\W+$", "", words[-1]).lower() == str(problem["answer"]).lower())
