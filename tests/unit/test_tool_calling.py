"""Tool calling (rlsvc/tools/): declarations checked, replies parsed by vLLM's own tool parsers,
and the token-in/token-out invariant across tool turns on the real Qwen3 and Llama 3.1 chat
templates (tiny tokenizers of those families with their tool tokens, rlsvc/tools/tiny.py).

The rollout runner plays the calculator task through an in-process OpenEnv pool with a scripted
generator that reads its prompt tokens and writes a call, then the answer it read in the tool's
result; no engine (the real vLLM engine's side: tests/integration/test_tool_rollout.py)."""

from __future__ import annotations

import re

import pytest

from rlsvc.task import TaskError
from rlsvc.tasks.calculator import CalculatorTask, calculate
from rlsvc.tools.schema import ToolCall, check_call, check_tools, function
from tests import tool_play
from tests.tool_play import play, sampled

family, tokenizer = tool_play.family, tool_play.tokenizer  # the two families' fixtures

PARAMS = {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}


def test_declarations_that_are_not_function_tools_or_json_schema_are_refused_in_one_line():
    assert set(check_tools([function("calculate", "d", PARAMS)])) == {"calculate"}
    bad = [
        ([{"name": "x"}], "not an OpenAI function tool"),
        ([function("x", "d", {"type": "object", "properties": {"a": {"type": "wibble"}}})], "not a valid JSON schema"),
        ([function("x", "d", {"type": "string"})], "of type object"),
        ([function("x", "d", PARAMS), function("x", "d", PARAMS)], "declared twice"),
    ]
    for tools, message in bad:
        with pytest.raises(TaskError, match=message) as e:
            check_tools(tools, "env.options.tools")
        assert "\n" not in str(e.value) and str(e.value).startswith("env.options.tools[")
    declared = check_tools([function("calculate", "d", PARAMS)])
    assert check_call(ToolCall("calculate", {"expression": "1+2"}), declared) is None
    assert "unknown tool" in (check_call(ToolCall("nope", {}), declared) or "")
    assert "'expression' is a required property" in (check_call(ToolCall("calculate", {}), declared) or "")


def _call_text(family: str, expression: str, compact: bool = False) -> str:
    sep = (",", ":") if compact else (", ", ": ")
    key = "arguments" if family == "qwen3" else "parameters"
    body = f'{{"name"{sep[1]}"calculate"{sep[0]}"{key}"{sep[1]}{{"expression"{sep[1]}"{expression}"}}}}'
    return f"<tool_call>\n{body}\n</tool_call>" if family == "qwen3" else body


def test_replies_are_parsed_by_the_familys_vllm_parser(family, tokenizer):
    codec = CalculatorTask().make_codec(tokenizer)
    assert codec.parser.name == {"qwen3": "hermes", "llama": "llama3_json"}[family]
    reply = codec.parse(_call_text(family, "12*34"))
    assert reply is not None and reply.calls == (ToolCall("calculate", {"expression": "12*34"}),)
    assert codec.parse("The answer is 413.").calls == ()  # no call: the answer
    malformed = [
        _call_text(family, "12*34")[:-9],  # cut inside the call
        _call_text(family, "12*34").replace("calculate", "launch"),  # a tool the task does not declare
        _call_text(family, "12*34").replace('"expression"', '"expr"'),  # arguments its schema refuses
    ]
    assert [codec.parse(text) for text in malformed] == [None, None, None]


class Scripted:
    """A policy that calls `calculate` on the question it reads in its prompt, then answers the
    number it reads in the last tool result (or writes `bad` on its first turn instead)."""

    def __init__(self, family: str, tokenizer, bad: str | None = None, compact: bool = False) -> None:
        self.family, self.tok, self.bad, self.compact = family, tokenizer, bad, compact
        self.prompts: list[list[int]] = []

    def generate(self, prompts, seeds):
        out = []
        for p in prompts:
            self.prompts.append(list(p))
            text = self.tok.decode(p)
            results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>|ipython<\|end_header_id\|>\n\n(.*?)<\|eot_id\|>", text, re.S)
            if not results:
                a, b, c = re.findall(r"What is (\d+) \* (\d+) \+ (\d+)\?", text)[-1]
                reply = self.bad if self.bad is not None else _call_text(self.family, f"{a}*{b}+{c}", self.compact)
            else:
                reply = f"The answer is {(results[-1][0] or results[-1][1]).strip(chr(34))}."
            out.append(sampled(self.tok, reply))
        return out


def _play(task, tokenizer, generator, groups=3):
    codec = task.make_codec(tokenizer, 4000)
    episodes, _ = play(task, codec, generator, [(g, 100 + g) for g in range(groups)], sessions=4, max_turns=4, group_size=2)
    return episodes


def test_tool_turns_extend_the_sampled_tokens_and_the_answer_uses_the_result(family, tokenizer):
    gen = Scripted(family, tokenizer)
    episodes = _play(CalculatorTask(), tokenizer, gen)
    for ep in episodes:
        assert ep.outcome == "correct" and ep.env_return == 1.0 and len(ep.responses) == 2 and ep.continued
        sequence: list[int] = []
        for added, response in zip(ep.prompts, ep.responses):
            assert sequence + added in gen.prompts  # vLLM got the earlier tokens unchanged
            sequence += added + response
        turn = tokenizer.decode(ep.prompts[1])
        value = str(CalculatorTask().problem(100 + ep.group_id)["value"])
        if family == "qwen3":
            assert (
                turn
                == f"\n<|im_start|>user\n<tool_response>\n{value}\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
            )
        else:
            assert (
                turn
                == f'<|start_header_id|>ipython<|end_header_id|>\n\n"{value}"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n'
            )


def test_re_rendering_the_transcript_drifts_where_the_token_sequence_does_not(family, tokenizer):
    """What the peers do between turns (decode, rebuild messages, apply the template again)
    gives the trainer tokens vLLM never saw: Qwen3's template drops the `<think>` block of an
    earlier assistant turn, Llama 3.1's re-writes the call from its parsed JSON."""
    task = CalculatorTask()
    gen = Scripted(family, tokenizer, compact=True)
    ep = _play(task, tokenizer, gen, groups=1)[0]
    assert ep.outcome == "correct"
    call = task.make_codec(tokenizer).parse(ep.texts[0]).calls[0]
    messages = [
        *task.prompt(task.problem(100)),
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": call.name, "arguments": call.arguments}}],
        },
        {"role": "tool", "name": call.name, "content": str(calculate(call.arguments["expression"]))},
        {"role": "assistant", "content": ep.texts[1]},
    ]
    text = tokenizer.apply_chat_template(messages, tools=task.tools, tokenize=False, enable_thinking=False)
    rerendered = tokenizer.encode(text, add_special_tokens=False)
    sequence = ep.sequence()
    agree = next(i for i, (a, b) in enumerate(zip(rerendered, sequence)) if a != b)
    generation_prompt = len(tokenizer.encode("<think>\n\n</think>\n\n", add_special_tokens=False)) if family == "qwen3" else 0
    # both agree up to the first reply's generation prompt, then drift before its end
    assert len(ep.prompts[0]) - generation_prompt <= agree < len(ep.prompts[0]) + len(ep.responses[0])
    if family == "qwen3":  # the earlier turn's empty think block, which vLLM saw, is gone
        assert text.count("<think>") == 1 and tokenizer.decode(sequence).count("<think>\n\n</think>") == 2
    else:  # the call as sampled (compact JSON) is re-written from its parsed arguments
        assert ep.texts[0] in tokenizer.decode(sequence) and ep.texts[0] not in text


def test_a_malformed_call_is_an_invalid_answer_and_a_tools_error_goes_back_as_its_message(family, tokenizer):
    bad = _call_text(family, "12*34")[:-9]
    episodes = _play(CalculatorTask(), tokenizer, Scripted(family, tokenizer, bad=bad), groups=1)
    assert [ep.outcome for ep in episodes] == ["invalid", "invalid"] and all(ep.invalid for ep in episodes)
    gen = Scripted(family, tokenizer, bad=_call_text(family, "2**5"))  # ** is not in the calculator
    ep = _play(CalculatorTask(), tokenizer, gen, groups=1)[0]
    assert len(ep.responses) == 2 and ep.outcome == "wrong"
    assert "error: ValueError: not integer arithmetic: 2 ** 5" in tokenizer.decode(ep.prompts[1])


def test_a_tool_task_is_refused_without_episode_context_before_any_cluster_starts():
    from rlsvc.config import load_config
    from rlsvc.train import task_for

    chosen = ["env.task=rlsvc.tasks.calculator:CalculatorTask"]
    with pytest.raises(TaskError, match=r"^rollout.context: task calculator calls tools.*set rollout.context=episode$"):
        task_for(load_config(None, chosen), check_remote=False)
    assert isinstance(task_for(load_config(None, [*chosen, "rollout.context=episode"]), check_remote=False), CalculatorTask)


def test_the_warm_start_writes_demonstrations_in_the_familys_call_format(family, tokenizer):
    import random

    task = CalculatorTask()
    codec = task.make_codec(tokenizer)
    assert task.has("warm_start_examples")
    [(obs, demo)] = task.warm_start_examples(random.Random(0), 1)
    ids = codec.answer_ids(demo)
    assert ids[-1] == tokenizer.eos_token_id
    text = tokenizer.decode(ids[:-1], skip_special_tokens=True)
    assert codec.parse(text) == demo  # what the policy learns to write is what the parser reads
    assert text.startswith("<tool_call>\n{" if family == "qwen3" else '{"name": "calculate", "parameters"')
