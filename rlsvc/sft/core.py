"""The supervised stage's core: problems -> encoded examples -> length-grouped batches -> steps of
the RL trainer's own `sft_step` (`rlsvc/trainer/titan_trainer.py`: cross-entropy on the masked
tokens, a token mean over the global batch, the same AdamW and grad clipping as GRPO steps), so
the weights SFT writes are the weights the RL job starts from, in the same model code.

Plain class: the trainer is any object with `sft_step(input_ids, loss_mask) -> float` (one
`TitanTrainer` rank here; a Ray trainer group has the same method for the job that will drive it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from rlsvc.reasoning.answers import AnswerFormat
from rlsvc.reasoning.data import Problem
from rlsvc.reasoning.prompts import PromptTemplate
from rlsvc.sft.batching import collate, group_by_length, padded_share
from rlsvc.sft.examples import Example, encode


class SFTStepper(Protocol):
    def sft_step(self, input_ids: torch.Tensor, loss_mask: torch.Tensor) -> float: ...


@dataclass
class SFTCore:
    trainer: SFTStepper | None
    """steps `epoch`; None for a core that only encodes and batches (a job checks its data first)"""
    tokenizer: Any
    template: PromptTemplate = field(default_factory=PromptTemplate)
    answer_format: AnswerFormat = "gsm8k"
    max_len: int = 512
    """longest example in tokens; longer ones are left out (and counted in `skipped`)"""
    tokens_per_batch: int = 8192
    """padded tokens per optimiser step (rows x the longest row)"""
    seed: int = 0
    min_rows: int = 1
    """rows per batch at least: the trainer's data-parallel ranks (each takes a share of the rows)"""
    skipped: int = 0

    def examples(self, problems: Sequence[Problem]) -> list[Example]:
        """Each problem's prompt (the template, as RL renders it) and worked solution, encoded."""
        out = []
        for p in problems:
            e = encode(self.tokenizer, self.template.render(p.question, self.answer_format), p.solution, self.max_len)
            if e is None:
                self.skipped += 1
            else:
                out.append(e)
        return out

    def batches(self, examples: Sequence[Example], epoch: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One epoch's batches, in an order fixed by the seed and the epoch."""
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        for rows in group_by_length([len(e) for e in examples], self.tokens_per_batch, self.seed + epoch, self.min_rows):
            yield collate([examples[i] for i in rows], pad)

    def steps_per_epoch(self, examples: Sequence[Example]) -> int:
        """Batches in an epoch (the first epoch's order; others group the same rows alike)."""
        return len(list(group_by_length([len(e) for e in examples], self.tokens_per_batch, self.seed, self.min_rows)))

    def padded_share(self, examples: Sequence[Example]) -> float:
        lengths = [len(e) for e in examples]
        return padded_share(lengths, group_by_length(lengths, self.tokens_per_batch, self.seed, self.min_rows))

    def epoch(self, examples: Sequence[Example], epoch: int = 0) -> list[float]:
        """Train one epoch; each step's loss (mean cross-entropy per answer token)."""
        if self.trainer is None:
            raise ValueError("SFTCore.epoch needs a trainer")
        return [self.trainer.sft_step(ids, mask) for ids, mask in self.batches(examples, epoch)]
