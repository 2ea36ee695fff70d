"""The `TaskCodec` of a tool-calling task: its first prompt rendered with `tools=`, replies parsed
by vLLM's tool parser, and each later turn the tool results as the chat template renders them,
appended to the episode's sampled tokens (rlsvc/tools/template.py says why nothing is rendered
again). `ToolTask.make_codec` builds it; `rlsvc.policy_io.make_codec` asks the task for it."""

from __future__ import annotations

from typing import Any

from rlsvc.policy_io import TaskCodec
from rlsvc.task import Prompt
from rlsvc.tools.parser import ToolCallParser
from rlsvc.tools.schema import ToolReply
from rlsvc.tools.template import ToolTemplate


class ToolCodec(TaskCodec):
    # a ToolTask, or a task of another base with its hooks (tools, tool_parser, accepts,
    # tool_results: rlsvc/tasks/code_tools.py)
    task: Any

    def __init__(self, task: Any, tokenizer: Any, max_prompt_tokens: int | None = None) -> None:
        super().__init__(task, tokenizer, max_prompt_tokens)
        self.template = ToolTemplate(tokenizer, task.tools)
        self.parser = ToolCallParser(tokenizer, task.tools, task.tool_parser)

    def tokens(self, prompt: Prompt) -> list[int]:
        """The first prompt with the tools, start token first, its end kept when too long."""
        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        ids = self.template.prompt_ids(prompt)
        ids = ids[1:] if self.bos and ids and ids[0] == self.bos[0] else ids  # the template writes its own
        if self.max_prompt_tokens is not None:
            ids = ids[-(self.max_prompt_tokens - len(self.bos)) :]
        return self.bos + ids

    def parse(self, text: str) -> ToolReply | None:
        """The reply's calls; None for a malformed reply or one the task does not accept."""
        reply = self.parser.parse(text)
        return reply if reply is not None and self.task.accepts(reply) else None

    def answer_ids(self, answer: Any) -> list[int]:
        """An answer's tokens as the policy writes them, ending its turn; a `ToolReply` (a warm
        start's demonstration, `ToolTask.demonstration`) as the family's calls."""
        if isinstance(answer, ToolReply) and answer.calls:
            answer = answer.content + self.template.reply_text(answer.payload()["calls"])
        return super().answer_ids(str(answer.content if isinstance(answer, ToolReply) else answer))

    def next_turn(self, sequence: list[int], obs: Any) -> list[int] | None:
        """The tokens after `sequence` (ending with the reply that made the calls) for the tool
        results in `obs.results`: the reply's end-of-turn if vLLM did not sample it (cut at
        `rollout.max_tokens`), then the `tool` messages and the generation prompt. None when
        the sequence would no longer leave room to answer."""
        ended = bool(sequence) and sequence[-1] == self.end_of_turn[0]
        ids = ([] if ended else list(self.end_of_turn)) + self.template.results_ids(self.task.tool_results(obs))
        if self.prompt_room is not None and len(sequence) + len(ids) > self.prompt_room:
            return None
        return ids
