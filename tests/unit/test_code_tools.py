"""The code environment with tools (rlsvc/tasks/code_tools.py): `python(code)` runs a cell in the
episode's session (the local sandbox) and its output comes back as the tool's message;
`submit(answer)` is scored by the code environment; a reply without exactly one call is invalid.
A scripted policy plays through the rollout runner and an in-process pool on the real Qwen3 and
Llama 3.1 templates."""

from __future__ import annotations

import json
import re

import pytest

from rlsvc.problems.arithmetic import arithmetic_problem
from rlsvc.task import TaskError
from rlsvc.tasks.code_tools import CodeToolsTask
from tests import tool_play
from tests.tool_play import play, sampled

family, tokenizer = tool_play.family, tool_play.tokenizer  # the two families' fixtures

SEEDS = [300, 301]


def _call(family: str, name: str, **arguments: str) -> str:
    key = "arguments" if family == "qwen3" else "parameters"
    body = json.dumps({"name": name, key: arguments})
    return f"<tool_call>\n{body}\n</tool_call>" if family == "qwen3" else body


class Scripted:
    """Runs `code(answer)` in python on its first turn, then submits the last line the tool printed."""

    def __init__(self, family: str, tokenizer, code) -> None:
        self.family, self.tok, self.code = family, tokenizer, code
        self.answers = {arithmetic_problem(s).prompt: arithmetic_problem(s).answer for s in SEEDS}

    def generate(self, prompts, seeds):
        out = []
        for p in prompts:
            text = self.tok.decode(p)
            outputs = re.findall(r"<tool_response>\n(.*?)\n</tool_response>|ipython<\|end_header_id\|>\n\n(.*?)<\|eot_id\|>", text, re.S)
            if outputs:
                printed = outputs[-1][0] or json.loads(outputs[-1][1])
                reply = _call(self.family, "submit", answer=printed.strip().splitlines()[-1])
            else:
                question = next(q for q in self.answers if q in text)
                reply = _call(self.family, "python", code=self.code(self.answers[question]))
            out.append(sampled(self.tok, reply))
        return out


def _play(tokenizer, generator):
    task = CodeToolsTask(tasks="arithmetic", max_turns=3, exec_timeout_s=10)
    codec = task.make_codec(tokenizer, 4000)
    episodes, _ = play(task, codec, generator, list(enumerate(SEEDS)), sessions=2, max_turns=3)
    return episodes, codec


def test_python_runs_in_the_session_and_submit_is_scored(family, tokenizer):
    episodes, codec = _play(tokenizer, Scripted(family, tokenizer, lambda answer: f"x = {answer}\nprint(x)"))
    for ep in episodes:
        assert ep.outcome == "solved" and ep.env_return == 1.0 and len(ep.responses) == 2
        assert codec.end_of_turn[0] == ep.responses[0][-1] and ep.prompts[1][0] != codec.end_of_turn[0]  # appended, not re-rendered
    assert CodeToolsTask().metrics(episodes)["code_turns_per_episode"] == 1.0


def test_a_cells_error_is_the_tools_message_and_a_reply_without_one_call_is_invalid(family, tokenizer):
    episodes, _ = _play(tokenizer, Scripted(family, tokenizer, lambda answer: "1/0"))
    assert all("ZeroDivisionError: division by zero" in tokenizer.decode(ep.prompts[1]) for ep in episodes)
    task = CodeToolsTask()
    codec = task.make_codec(tokenizer)
    two = _call(family, "python", code="1") + ("\n" if family == "qwen3" else "; ") + _call(family, "submit", answer="1")
    assert codec.parser.parse(two) is not None and len(codec.parser.parse(two).calls) == 2
    assert codec.parse(two) is None and codec.parse("I think it is 4.") is None
    with pytest.raises(TaskError, match="code_tools: .*unexpected keyword argument 'wibble'"):
        CodeToolsTask(wibble=1)
