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
from rlsvc.task import Prompt, Task


class TaskCodec:
    def __init__(self, task: Task, tokenizer: Any, max_prompt_tokens: int | None = None) -> None:
        self.task = task
        self.tokenizer = tokenizer
        self.bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
        self.max_prompt_tokens = None if max_prompt_tokens is None else max_prompt_tokens - len(self.bos)
        self.prompt_format: str = getattr(task, "prompt_format", task.name)
        self.outcomes = task.outcomes
        self._cache: dict[Hashable, list[int]] = {}

    def encode(self, obs: Any) -> list[int]:
        """Prompt token ids; a long prompt keeps its end (the latest output and the cue)."""
        key = self.task.prompt_key(obs)
        if key is not None and key in self._cache:
            return self._cache[key]
        ids = self.tokens(self.task.render(obs))
        if self.max_prompt_tokens is not None:
            ids = ids[-self.max_prompt_tokens :]
        ids = self.bos + ids
        if key is not None:
            self._cache[key] = ids
        return ids

    def tokens(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            return list(self.tokenizer.encode(prompt, add_special_tokens=False))
        ids = self.tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        # the template writes its own start token; encode() adds bos in front again
        return list(ids[1:] if self.bos and ids and ids[0] == self.bos[0] else ids)

    def parse(self, text: str) -> Any | None:
        return self.task.parse(text)

    def observe(self, obs: Any) -> dict[str, Any]:
        """What a transcript keeps of an observation."""
        return self.task.observe(obs)

    def episode_metrics(self, episodes: list[Episode]) -> dict[str, float]:
        return self.task.metrics(episodes)

    def answer_ids(self, answer: str) -> list[int]:
        return list(self.tokenizer.encode(answer, add_special_tokens=False))

    @property
    def allowed_token_ids(self) -> list[int] | None:
        """The task's answers as one token each (constrained decoding), or None when the task
        has no fixed answers or an answer takes several tokens."""
        answers = self.task.answers()
        if not answers:
            return None
        ids = [self.answer_ids(a) for a in answers]
        return [i[0] for i in ids] if all(len(i) == 1 for i in ids) else None


class BlackjackCodec(TaskCodec):
    """The built-in BlackJack task's codec (the name earlier callers use)."""

    def __init__(self, tokenizer: Any, then_stick_at: int | None = None) -> None:
        from rlsvc.tasks.blackjack import BlackjackTask

        super().__init__(BlackjackTask(then_stick_at), tokenizer)


class CodeCodec(TaskCodec):
    """The built-in code task's codec (the name earlier callers use)."""

    def __init__(self, tokenizer: Any, max_prompt_tokens: int) -> None:
        from rlsvc.tasks.code import CodeTask

        super().__init__(CodeTask(), tokenizer, max_prompt_tokens)


def make_codec(task: Task, tokenizer: Any, max_seq_len: int, max_tokens: int) -> TaskCodec:
    """The codec a job uses: prompts leave room for `max_tokens` sampled tokens."""
    return TaskCodec(task, tokenizer, max_seq_len - max_tokens)
