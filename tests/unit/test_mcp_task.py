"""An MCP tool server as an environment (rlsvc/tools/mcp_task.py): a server written with
`fastmcp` (tests/data/mcp_lookup_server.py) runs on 127.0.0.1; its tools are listed through MCP
into the prompt's `tools=`, and a scripted policy's calls reach it through the environment's
steps (the rollout runner and an in-process pool, the Qwen3 template). A tool's error is the
tool's message; a server that does not answer is one line before any cluster starts; one that
goes away mid-episode fails that episode."""

from __future__ import annotations

import json
import re

import pytest

from rlsvc.models.hf_tokenizer import build_chat_tokenizer
from rlsvc.task import TaskError
from rlsvc.tools.mcp_task import McpToolTask
from rlsvc.tools.tiny import tool_tokenizer
from tests.tool_play import free_port, mcp_server, play, sampled

ROWS = [{"question": "What is the code of Paris?", "answer": "K7"}, {"question": "What is the code of Oslo?", "answer": "Z9"}]


@pytest.fixture(scope="module")
def server():
    with mcp_server() as served:
        yield served


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    path = tmp_path_factory.mktemp("mcp") / "problems.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


class Scripted:
    """Looks up the city its question names (or `city`), then answers what the tool returned."""

    def __init__(self, tokenizer, city: str | None = None) -> None:
        self.tok, self.city = tokenizer, city

    def generate(self, prompts, seeds):
        out = []
        for p in prompts:
            text = self.tok.decode(p)
            results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", text, re.S)
            if results:
                reply = f"The code is {results[-1]}."
            else:
                city = self.city or re.findall(r"code of (\w+)\?", text)[-1]
                reply = "<tool_call>\n" + json.dumps({"name": "lookup", "arguments": {"city": city}}) + "\n</tool_call>"
            out.append(sampled(self.tok, reply))
        return out


def _play(task, generator):
    tokenizer = tool_tokenizer(build_chat_tokenizer("qwen3", 720), "qwen3")
    episodes, stats = play(task, task.make_codec(tokenizer, 4000), generator(tokenizer), [(0, 0), (1, 1)], sessions=2, max_turns=3)
    return episodes, tokenizer, stats


def test_the_servers_tools_are_listed_and_called_through_env_steps(server, problems):
    url, _ = server
    task = McpToolTask(url, str(problems))
    [tool] = task.tools
    assert tool["function"]["name"] == "lookup" and tool["function"]["parameters"]["required"] == ["city"]
    episodes, tokenizer, _ = _play(task, Scripted)
    assert [(ep.outcome, ep.env_return, len(ep.responses)) for ep in episodes] == [("correct", 1.0, 2)] * 2
    assert '"name": "lookup"' in tokenizer.decode(episodes[0].prompts[0])  # the MCP tool, in the prompt's tools=
    assert "<tool_response>\nK7\n</tool_response>" in tokenizer.decode(episodes[0].prompts[1])

    wrong, tokenizer, _ = _play(McpToolTask(url, str(problems)), lambda tok: Scripted(tok, city="Atlantis"))
    assert [ep.outcome for ep in wrong] == ["wrong"] * 2
    assert "error: RuntimeError: no city named 'Atlantis'" in tokenizer.decode(wrong[0].prompts[1])


def test_a_server_that_does_not_answer_is_one_line_before_any_cluster(problems):
    from rlsvc.config import load_config
    from rlsvc.train import task_for

    url = f"http://127.0.0.1:{free_port()}/mcp"
    cfg = load_config(
        None,
        [
            "env.task=rlsvc.tools.mcp_task:McpToolTask",
            f"env.options.url={url}",
            f"env.options.problems={problems}",
            "rollout.context=episode",
        ],
    )
    with pytest.raises(TaskError, match=rf"^env.options.url: the MCP server at {re.escape(url)} does not answer") as e:
        task_for(cfg, check_remote=False)
    assert "\n" not in str(e.value)
    with pytest.raises(TaskError, match="env.options.problems: cannot read"):
        McpToolTask(url, str(problems) + ".missing")


def test_a_server_gone_mid_episode_fails_the_episode_not_the_policy(problems):
    task = McpToolTask("http://127.0.0.1:1/mcp", str(problems), timeout_s=2.0)
    task._tools = [
        {
            "type": "function",
            "function": {"name": "lookup", "description": "", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
        }
    ]
    episodes, _, stats = _play(task, Scripted)
    assert all(ep.failed and ep.outcome == "env_error" for ep in episodes) and stats["env_errors"] == 2


def test_rows_with_a_demonstrated_call_give_whole_warm_start_episodes_through_the_server(server, tmp_path):
    from rlsvc.tools.warm_start import episode_example

    url, _ = server
    rows = [{**ROWS[0], "call": {"name": "lookup", "arguments": {"city": "Paris"}}}, ROWS[1]]
    path = tmp_path / "demonstrated.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = McpToolTask(url, str(path))
    tokenizer = tool_tokenizer(build_chat_tokenizer("qwen3", 720), "qwen3")
    example = episode_example(task, task.make_codec(tokenizer), task.problem(0))
    text = tokenizer.decode(example.ids)
    assert "<tool_response>\nK7\n</tool_response>" in text  # the server's result, by an MCP call
    learned = tokenizer.decode([t for t, m in zip(example.ids, example.loss_mask) if m])
    assert learned.startswith('<tool_call>\n{"name": "lookup", "arguments": {"city": "Paris"}}') and learned.endswith("K7<|im_end|>")
    assert task.demonstration(task.problem(1)) is None and task.final_answer(task.problem(1)) is None
