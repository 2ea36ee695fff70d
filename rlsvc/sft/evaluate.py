"""Held-out greedy accuracy of a Hugging Face checkpoint, generated with `transformers`.

Why `transformers.generate` in the driver and not a vLLM engine: the supervised job has no rollout
workers, and starting an engine costs about 45 s on this machine's two cores (docs/design.md), more
than the whole evaluation of the tiny model; the folder evaluated is the folder written, loaded
as any user would load it. The prompt is encoded exactly as SFT and the RL rollout encode it
(`rlsvc/sft/examples.py` `prompt_ids`), the answer scored by the reasoning reward's strict rule
(the required final line, then math-verify equivalence: `rlsvc/reasoning/rewards.py`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlsvc.reasoning.answers import AnswerFormat
from rlsvc.reasoning.data import Problem
from rlsvc.reasoning.prompts import PromptTemplate
from rlsvc.reasoning.rewards import ReasoningReward
from rlsvc.sft.examples import prompt_ids


@dataclass(frozen=True)
class Accuracy:
    accuracy: float
    """share of problems answered right under the strict rule"""
    stderr: float
    """its standard error, sqrt(p (1 - p) / n)"""
    n: int
    completions: list[str]
    right: list[bool]
    """each completion's strict verdict"""

    def metrics(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}/accuracy": self.accuracy, f"{prefix}/accuracy_stderr": self.stderr, f"{prefix}/problems": float(self.n)}


def stderr(p: float, n: int) -> float:
    return math.sqrt(p * (1 - p) / n) if n else 0.0


def left_padded(rows: Sequence[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) with every row right-aligned, as batched generation needs."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r)
        mask[i, width - len(r) :] = 1
    return ids, mask


def greedy_completions(model: Any, tokenizer: Any, prompts: Sequence[list[int]], max_new_tokens: int, batch_size: int) -> list[str]:
    """Each prompt's greedy continuation up to eos or `max_new_tokens`, decoded without special tokens."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out: list[str] = []
    for start in range(0, len(prompts), batch_size):
        ids, mask = left_padded(prompts[start : start + batch_size], pad)
        with torch.no_grad():
            generated = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=pad,
                eos_token_id=tokenizer.eos_token_id,
            )
        out += tokenizer.batch_decode(generated[:, ids.shape[1] :], skip_special_tokens=True)
    return out


def evaluate_folder(
    folder: str | Path,
    problems: Sequence[Problem],
    template: PromptTemplate,
    answer_format: AnswerFormat,
    max_new_tokens: int,
    batch_size: int,
) -> Accuracy:
    """Load `folder` with `transformers` (weights and tokenizer) and score its greedy answers."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    prompts = [prompt_ids(tokenizer, template.render(p.question, answer_format)) for p in problems]
    return score(greedy_completions(model, tokenizer, prompts, max_new_tokens, batch_size), problems, answer_format)


def score(completions: Sequence[str], problems: Sequence[Problem], answer_format: AnswerFormat) -> Accuracy:
    """Strict accuracy of `completions` (one per problem) and its standard error."""
    reward = ReasoningReward(answer_format)
    right = [reward(c, p.final).strict for c, p in zip(completions, problems, strict=True)]
    p = sum(right) / len(right) if right else 0.0
    return Accuracy(p, stderr(p, len(right)), len(right), list(completions), right)
