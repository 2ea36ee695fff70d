"""Prompts with `tools=` and the tokens a turn of tool results appends, through the chat template.

Token-in/token-out across tool turns: an episode is one token sequence, its first prompt the
chat template's rendering of the task's messages with the tools, then each reply exactly as
vLLM sampled it, then the tool results as the template renders `tool` messages after an
assistant turn, with the generation prompt. The earlier turns are never rendered again: a
template that is not append-only (Qwen3 drops or rewrites `<think>` blocks of earlier assistant
turns and normalises the whitespace around them; a call re-rendered from its parsed JSON loses
the sampled spacing) would otherwise give the trainer tokens vLLM never sampled.

The tokens of a results turn are read off the template: a probe conversation with a marker for
the assistant's reply, followed by the tool messages and the generation prompt, rendered; what
follows the marker (less the end-of-turn token the reply itself ends with) is the turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlsvc.saved_policy import CHAT_OPTIONS

_REPLY = "\x00REPLY\x00"


class ToolTemplate:
    """The chat template of `tokenizer` with the task's `tools`."""

    def __init__(self, tokenizer: Any, tools: Sequence[dict[str, Any]]) -> None:
        self.tokenizer = tokenizer
        self.tools = list(tools)
        self.eos = tokenizer.eos_token or ""

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """The first prompt's tokens: the messages with the tools, and the generation prompt."""
        text = self.tokenizer.apply_chat_template(messages, tools=self.tools, add_generation_prompt=True, tokenize=False, **CHAT_OPTIONS)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def results_text(self, results: Sequence[dict[str, Any]]) -> str:
        """The text that follows an assistant reply's end-of-turn token for `results` (each a
        `{"name": ..., "content": ...}` tool message), up to and including the generation prompt."""
        return self.turn_text([{"role": "tool", "name": r["name"], "content": str(r["content"])} for r in results])

    def turn_text(self, messages: Sequence[dict[str, Any]]) -> str:
        """The text that follows an assistant reply's end-of-turn token for the next `messages`
        (`tool` results, a `user` message), up to and including the generation prompt."""
        probe = [{"role": "user", "content": "?"}, {"role": "assistant", "content": _REPLY}]
        full = self.tokenizer.apply_chat_template([*probe, *messages], add_generation_prompt=True, tokenize=False, **CHAT_OPTIONS)
        after = full[full.index(_REPLY) + len(_REPLY) :]
        if not self.eos or not after.startswith(self.eos):
            raise ValueError(f"the chat template does not close an assistant turn with its end-of-turn token {self.eos!r}")
        return after[len(self.eos) :]

    def reply_text(self, calls: Sequence[dict[str, Any]]) -> str:
        """The text of an assistant reply making `calls` (each `{"name": ..., "arguments": {...}}`)
        as the template writes it after the generation prompt, without the end-of-turn token: the
        family's own call format, for a warm start's demonstrations."""
        question = [{"role": "user", "content": "?"}]
        tool_calls = [{"type": "function", "function": c} for c in calls]
        cue = self.tokenizer.apply_chat_template(question, tools=self.tools, add_generation_prompt=True, tokenize=False, **CHAT_OPTIONS)
        full = self.tokenizer.apply_chat_template(
            [*question, {"role": "assistant", "content": "", "tool_calls": tool_calls}], tools=self.tools, tokenize=False, **CHAT_OPTIONS
        )
        if not full.startswith(cue) or self.eos not in full[len(cue) :]:
            raise ValueError("the chat template does not write an assistant's calls after its generation prompt")
        return full[len(cue) : full.index(self.eos, len(cue))]

    def results_ids(self, results: Sequence[dict[str, Any]]) -> list[int]:
        """`results_text` as token ids (after the end-of-turn token, so nothing merges across)."""
        return list(self.tokenizer.encode(self.results_text(results), add_special_tokens=False))
