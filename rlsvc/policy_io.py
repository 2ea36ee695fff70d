"""How the policy reads and writes a task with a given tokenizer: observation -> prompt token ids
(text, or chat messages through the tokenizer's chat template), sampled text -> action, answers
as token ids, and the task's episode metrics.

Shared by training (rollout, warm start, validation) and evaluation, so all of them see exactly
the same prompts.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from rlsvc.buffer.replay import Episode
from rlsvc.saved_policy import CHAT_OPTIONS, prompt_ids
from rlsvc.task import Prompt, Task

__all__ = ["CHAT_OPTIONS", "TaskCodec", "make_codec"]


class TaskCodec:
    def __init__(self, task: Task, tokenizer: Any, max_prompt_tokens: int | None = None) -> None:
        self.task = task
        self.tokenizer = tokenizer
        self.bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
        self.prompt_room = max_prompt_tokens
        """The longest prompt (all turns so far with the next reply) that leaves room to answer."""
        self.max_prompt_tokens = max_prompt_tokens
        """Where a first prompt is cut (its start token included), keeping its end."""
        # a chat model's answer ends its turn with eos (vLLM stops there; the template closes it)
        self.end_of_turn = [tokenizer.eos_token_id] if task.chat and tokenizer.eos_token_id is not None else []
        self._reply: tuple[str, str] | None = None  # the chat template around a later user message
        self.prompt_format: str = getattr(task, "prompt_format", task.name)
        self.outcomes = task.outcomes
        self._cache: dict[Hashable, list[int]] = {}

    def encode(self, obs: Any) -> list[int]:
        """Prompt token ids; a long prompt keeps its end (the latest output and the cue)."""
        key = self.task.prompt_key(obs)
        if key is not None and key in self._cache:
            return self._cache[key]
        ids = self.tokens(self.task.render(obs))
        if key is not None:
            self._cache[key] = ids
        return ids

    def tokens(self, prompt: Prompt) -> list[int]:
        """The prompt's tokens, start token first, its end kept when it is too long (the encoding
        a saved policy is queried with: `rlsvc.saved_policy.prompt_ids`)."""
        return prompt_ids(self.tokenizer, prompt, self.max_prompt_tokens)

    def parse(self, text: str) -> Any | None:
        return self.task.parse(text)

    def observe(self, obs: Any) -> dict[str, Any]:
        """What a transcript keeps of an observation."""
        return self.task.observe(obs)

    def episode_metrics(self, episodes: list[Episode]) -> dict[str, float]:
        return self.task.metrics(episodes)

    def answer_ids(self, answer: str) -> list[int]:
        """An answer's tokens as the policy writes them (ending its turn, for a chat task)."""
        return list(self.tokenizer.encode(answer, add_special_tokens=False)) + self.end_of_turn

    def next_turn(self, sequence: list[int], obs: Any) -> list[int] | None:
        """The tokens that follow an episode's `sequence` (every earlier prompt and answer, as
        sampled) for the environment's reply `obs`: the end of the answer's turn if vLLM did not
        write it (the answer was cut at `rollout.max_tokens`), then the reply as the chat
        template renders a user message with its generation prompt. The earlier tokens are never
        decoded and encoded again. None when the sequence would no longer leave room to answer."""
        text = self.task.render_next(obs)
        if self.task.chat:
            before, after = self._reply_template()
            text = before + text + after
        ended = bool(self.end_of_turn) and bool(sequence) and sequence[-1] == self.end_of_turn[0]
        ids = ([] if ended else self.end_of_turn) + list(self.tokenizer.encode(text, add_special_tokens=False))
        if self.prompt_room is not None and len(sequence) + len(ids) > self.prompt_room:
            return None
        return ids

    def _reply_template(self) -> tuple[str, str]:
        """(text before, text after) a later user message, read off the chat template: a probe
        conversation rendered with and without one more user turn. What follows the assistant's
        answer in the template (after its end-of-turn token, e.g. ChatML's newline) comes first."""
        if self._reply is None:
            mark, answer = "\x00REPLY\x00", "\x00ANSWER\x00"
            probe = [{"role": "user", "content": "?"}, {"role": "assistant", "content": answer}]
            base = self.tokenizer.apply_chat_template(probe, tokenize=False, **CHAT_OPTIONS)
            full = self.tokenizer.apply_chat_template(
                [*probe, {"role": "user", "content": mark}], add_generation_prompt=True, tokenize=False, **CHAT_OPTIONS
            )
            if not full.startswith(base) or mark not in full:
                raise ValueError(
                    "the tokenizer's chat template does not extend a conversation by appending (needed for rollout.context=episode)"
                )
            closing = base[base.index(answer) + len(answer) :]
            eos = self.tokenizer.eos_token or ""
            closing = closing[len(eos) :] if eos and closing.startswith(eos) else closing
            added = full[len(base) :]
            self._reply = (closing + added[: added.index(mark)], added[added.index(mark) + len(mark) :])
        return self._reply

    @property
    def allowed_token_ids(self) -> list[int] | None:
        """The task's answers as one token each (constrained decoding), or None when the task
        has no fixed answers or an answer takes several tokens."""
        answers = self.task.answers()
        if not answers:
            return None
        ids = [self.answer_ids(a) for a in answers]
        return [i[0] for i in ids] if all(len(i) == 1 for i in ids) else None


def make_codec(task: Task, tokenizer: Any, max_seq_len: int, max_tokens: int) -> TaskCodec:
    """The codec a job uses: prompts leave room for `max_tokens` sampled tokens. A task with its
    own prompt and reply format (a tool-calling task, rlsvc/tools/task.py) builds its own."""
    own = getattr(task, "make_codec", None)
    if own is not None:
        return own(tokenizer, max_seq_len - max_tokens)  # type: ignore[no-any-return]
    return TaskCodec(task, tokenizer, max_seq_len - max_tokens)
