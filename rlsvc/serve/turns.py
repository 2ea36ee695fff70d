"""A request's messages -> the prompt's token ids, and a sampled reply -> the assistant message.

The first call of an episode is rendered by the chat template with the request's `tools=` (the
same rendering a tool task's first prompt has, rlsvc/tools/template.py). A later call must
repeat the earlier messages and the assistant message the endpoint returned, and add messages
after it (tool results, a user turn): its prompt is then the recorded tokens, the reply's
end-of-turn token if the engine did not sample one, and the chat template's rendering of the
added messages only. Nothing sampled is decoded and encoded again, so a template that is not
append-only (Qwen3 strips earlier `<think>` blocks) cannot change what the trainer sees. A
request that changes or drops earlier messages does not extend the recorded tokens: it is served
from a fresh rendering, and its episode is marked broken (invalid, not trained on).
"""

from __future__ import annotations

import json
from typing import Any

from rlsvc.serve.record import EndpointError, EpisodeRecord
from rlsvc.task import TaskError
from rlsvc.tools.parser import ToolCallParser
from rlsvc.tools.schema import ToolReply, check_tools
from rlsvc.tools.template import ToolTemplate


def _content(content: Any) -> str:
    """A message's content as text (OpenAI's list of text parts joined; None is empty)."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def _arguments(arguments: Any) -> Any:
    try:
        return json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return arguments


def normal(message: dict[str, Any]) -> tuple:
    """What two messages must share to be the same turn (ids and formatting of arguments aside)."""
    calls = tuple(
        (c.get("function", {}).get("name"), json.dumps(_arguments(c.get("function", {}).get("arguments")), sort_keys=True))
        for c in message.get("tool_calls") or []
    )
    return (message.get("role"), _content(message.get("content")).strip(), calls)


def check_messages(messages: Any) -> list[dict[str, Any]]:
    """The request's messages, or a 400 naming what is wrong."""
    if not isinstance(messages, list) or not messages:
        raise EndpointError("messages: a non-empty list of chat messages is required")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "developer", "user", "assistant", "tool"):
            raise EndpointError(f"messages[{i}]: not a chat message with a role of system, user, assistant or tool")
    return messages


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as chat templates read them: text content, calls' arguments as objects, and a
    tool result's `name` from the call it answers."""
    names = {c.get("id"): c.get("function", {}).get("name") for m in messages for c in m.get("tool_calls") or []}
    out = []
    for m in messages:
        t: dict[str, Any] = {"role": "system" if m["role"] == "developer" else m["role"], "content": _content(m.get("content"))}
        if m.get("tool_calls"):
            t["tool_calls"] = [
                {"type": "function", "function": {"name": c["function"]["name"], "arguments": _arguments(c["function"].get("arguments"))}}
                for c in m["tool_calls"]
            ]
        if m["role"] == "tool":
            t["name"] = m.get("name") or names.get(m.get("tool_call_id"), "")
        out.append(t)
    return out


class Turns:
    """Prompts and replies of endpoint episodes for one tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
        self.end_of_turn = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        self._parsers: dict[str, ToolCallParser] = {}

    def first_prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """The chat template's rendering with the tools and the generation prompt, its start
        token once (as a tool task's codec writes it, rlsvc/tools/codec.py)."""
        ids = ToolTemplate(self.tokenizer, tools or []).prompt_ids(template_messages(messages))
        ids = ids[1:] if self.bos and ids and ids[0] == self.bos[0] else ids
        return self.bos + ids

    def prompt(self, record: EpisodeRecord, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """The prompt of the episode's next call (see the module docstring); marks `record`
        broken when the messages do not extend its recorded turns."""
        if not record.calls:
            return self.first_prompt(messages, tools)
        added = self._added(record, messages, tools)
        if added is None:
            record.broken = record.broken or "not_append_only"
            return self.first_prompt(messages, tools)
        sequence = record.sequence()
        ended = bool(self.end_of_turn) and bool(sequence) and sequence[-1] == self.end_of_turn[0]
        text = ToolTemplate(self.tokenizer, tools or []).turn_text(template_messages(messages)[len(messages) - len(added) :])
        return [*sequence, *([] if ended else self.end_of_turn), *self.tokenizer.encode(text, add_special_tokens=False)]

    @staticmethod
    def _added(record: EpisodeRecord, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[dict] | None:
        """The messages after the last reply, or None when the request does not extend the
        recorded turns (other tools, changed or dropped messages, an assistant turn of its own)."""
        last = record.calls[-1]
        n = len(last.messages)
        if (tools or None) != (record.tools or None) or len(messages) <= n + 1:
            return None
        if [normal(m) for m in messages[:n]] != [normal(m) for m in last.messages] or normal(messages[n]) != normal(last.reply):
            return None
        added = messages[n + 1 :]
        return None if any(m["role"] == "assistant" for m in added) else added

    def parser(self, tools: list[dict[str, Any]]) -> ToolCallParser:
        """vLLM's parser for the tokenizer's family with `tools`; a 400 for declarations that are
        not OpenAI function tools with a JSON schema."""
        key = json.dumps(tools, sort_keys=True)
        if key not in self._parsers:
            try:
                check_tools(tools)
                self._parsers[key] = ToolCallParser(self.tokenizer, tools)
            except TaskError as e:
                raise EndpointError(str(e)) from None
        return self._parsers[key]

    def reply(self, out: dict[str, Any], tools: list[dict[str, Any]] | None, turn: int) -> tuple[dict[str, Any], str]:
        """(the assistant message, the finish reason) for the engine's result `out`. A reply that
        is not a readable call is returned as text, as vLLM's server does."""
        text = out["text"]
        cut = not self.end_of_turn or not out["token_ids"] or out["token_ids"][-1] != self.end_of_turn[0]
        parsed: ToolReply | None = self.parser(tools).parse(text) if tools else None
        if parsed is None or not parsed.calls:
            return {"role": "assistant", "content": text}, "length" if cut else "stop"
        calls = [
            {"id": f"call_{turn}_{i}", "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for i, c in enumerate(parsed.calls)
        ]
        return {"role": "assistant", "content": parsed.content or None, "tool_calls": calls}, "tool_calls"
