"""Batches of supervised examples: length-grouped rows under a token budget, right-padded.

Why grouping and not concatenating several examples into one row ("packing"): the trainer's
forward (`rlsvc/models/titan.py`) has no per-document attention mask or position reset for
unrelated examples, so a concatenated example would attend to the ones before it. Grouping rows of
similar length removes most of the padding instead: `padded_share` measures it, and
tests/unit/test_sft_core.py compares it with random batches on the generated problems.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

from rlsvc.sft.examples import Example


def group_by_length(lengths: Sequence[int], tokens_per_batch: int, seed: int = 0, min_rows: int = 1) -> list[list[int]]:
    """Indices of examples in batches: sorted by length, cut so that rows x the longest row stays
    within `tokens_per_batch`, then the batches shuffled by `seed` (so an epoch does not run from
    short to long). Every batch has at least `min_rows` rows (the data-parallel ranks: each rank
    needs a row), over the budget if it must; a short last batch joins the one before it."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if len(current) >= max(min_rows, 1) and (len(current) + 1) * lengths[i] > tokens_per_batch:
            batches.append(current)
            current = []
        current.append(i)
    if current and len(current) < min_rows and batches:
        batches[-1] += current
    elif current:
        batches.append(current)
    random.Random(seed).shuffle(batches)
    return batches


def collate(examples: Sequence[Example], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids [N, T], loss_mask [N, T] float) right-padded to the longest row; padding has no loss."""
    width = max(len(e) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.float32)
    for row, e in enumerate(examples):
        ids[row, : len(e)] = torch.tensor(e.ids)
        mask[row, : len(e)] = torch.tensor(e.loss_mask, dtype=torch.float32)
    return ids, mask


def padded_share(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """Padding tokens / all tokens the batches put through the model."""
    total = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return 1.0 - sum(lengths) / total if total else 0.0
