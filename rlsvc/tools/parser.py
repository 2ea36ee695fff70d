"""Sampled text -> tool calls, by vLLM's own tool parser for the model's family.

vLLM's OpenAI server parses a reply with the parser its `--tool-call-parser` names; rlsvc uses
the same classes (`vllm.tool_parsers`) on the rollout's decoded text, so a policy trained here
calls tools in exactly the format vLLM serves. Parsers by name: `hermes` (Qwen2.5/Qwen3 and
Hermes: `<tool_call>{"name": ..., "arguments": ...}</tool_call>`), `llama3_json` (Llama 3.1+:
a JSON object `{"name": ..., "parameters": ...}`); `auto` picks by the tokenizer's vocabulary.

A reply is malformed, and `parse` returns None (the runner then ends the episode as `invalid`,
counted in `invalid_rate`), when it starts a call the parser cannot read, calls a tool the task
does not declare, or passes arguments the tool's schema refuses.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, cast

from rlsvc.task import TaskError
from rlsvc.tools.schema import ToolCall, ToolReply, check_call, check_tools

PARSERS: dict[str, str] = {"hermes": "<tool_call>", "llama3_json": "{"}
"""The vLLM parsers rlsvc uses, and the text that starts a call in each (a reply holding it
but yielding no call is malformed; Llama 3's `<|python_tag|>` is a special token, which the
rollout's decoded text leaves out, so its calls start at the JSON object)."""


def choose_parser(tokenizer: Any, name: str = "auto") -> str:
    """The parser for `tokenizer`: `name` itself, or for `auto` `hermes` when the vocabulary has
    `<tool_call>`, `llama3_json` when it has `<|python_tag|>`. Raises `TaskError` otherwise."""
    if name != "auto":
        if name not in PARSERS:
            raise TaskError(f"tool_parser: unknown parser {name!r}; supported: auto, {', '.join(PARSERS)}")
        return name
    vocab = tokenizer.get_vocab()
    if "<tool_call>" in vocab:
        return "hermes"
    if "<|python_tag|>" in vocab:
        return "llama3_json"
    raise TaskError("tool_parser: the tokenizer has neither <tool_call> (hermes) nor <|python_tag|> (llama3_json); name the parser")


def _drop(record: logging.LogRecord) -> bool:
    return False


class ToolCallParser:
    """Parses decoded replies into a `ToolReply` with vLLM's parser `name` (see `choose_parser`)."""

    def __init__(self, tokenizer: Any, tools: Sequence[dict[str, Any]], name: str = "auto") -> None:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.tool_parsers import ToolParserManager

        self.declared = check_tools(tools)
        self.name = choose_parser(tokenizer, name)
        self.start = PARSERS[self.name]
        self._request = ChatCompletionRequest(model="rlsvc", messages=[], tools=list(tools))
        self._parser = ToolParserManager.get_tool_parser(self.name)(tokenizer, cast(Any, self._request.tools))
        # vLLM logs a traceback for every reply it cannot parse, and a learning policy writes
        # many: a filter (vLLM's logging set-up, when an engine starts, resets levels, not filters)
        logging.getLogger(type(self._parser).__module__).addFilter(_drop)

    def parse(self, text: str) -> ToolReply | None:
        """The reply's content and calls; None when it is malformed (see the module docstring)."""
        info = self._parser.extract_tool_calls(text, self._request)
        if not info.tools_called:
            return None if self._starts_call(text) else ToolReply(content=text)
        calls = []
        for tc in info.tool_calls:
            try:
                arguments = json.loads(tc.function.arguments)
            except (TypeError, ValueError):
                return None
            call = ToolCall(tc.function.name, arguments if isinstance(arguments, dict) else {})
            if not isinstance(arguments, dict) or check_call(call, self.declared) is not None:
                return None
            calls.append(call)
        return ToolReply(content=info.content or "", calls=tuple(calls))

    def _starts_call(self, text: str) -> bool:
        return text.lstrip().startswith(self.start) if self.start == "{" else self.start in text
