"""Supervised examples as token ids with a loss mask on the answer only.

A prompt is encoded exactly as the policy reads it during RL (`rlsvc/policy_io.py`): a chat prompt
through the tokenizer's chat template with its generation prompt (and the same template options),
a plain prompt as its text; the tokenizer's bos in front when it has one. The answer follows as
the policy would write it, then the end-of-turn (eos) token, so the model learns to stop. Only the
answer's tokens and that eos carry loss: the prompt is given, not learned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlsvc.policy_io import CHAT_OPTIONS  # the rollout's template options: the same prompt tokens
from rlsvc.task import Prompt


@dataclass(frozen=True)
class Example:
    ids: list[int]
    loss_mask: list[int]
    """1 on the answer's tokens and the closing eos, 0 on the prompt"""

    def __len__(self) -> int:
        return len(self.ids)


def prompt_ids(tokenizer: Any, prompt: Prompt) -> list[int]:
    """The prompt's tokens as the rollout encodes them (bos, then the text or the chat template)."""
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    if isinstance(prompt, str):
        return bos + list(tokenizer.encode(prompt, add_special_tokens=False))
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, **CHAT_OPTIONS)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    return bos + (ids[1:] if bos and ids and ids[0] == bos[0] else ids)


def encode(tokenizer: Any, prompt: Prompt, answer: str, max_len: int | None = None) -> Example | None:
    """One example, or None when it does not fit `max_len` tokens (cutting the answer would teach
    an answer without its final line)."""
    head = prompt_ids(tokenizer, prompt)
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    tail = list(tokenizer.encode(answer, add_special_tokens=False)) + eos
    if max_len is not None and len(head) + len(tail) > max_len:
        return None
    return Example(head + tail, [0] * len(head) + [1] * len(tail))
