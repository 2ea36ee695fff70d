"""Episodes -> the padded tensors a trainer step takes.

Each decision of an episode is one row: its prompt followed by the sampled tokens; an episode
played as one token sequence (`Episode.continued`) is one row, the loss on every turn's sampled
tokens. Every row carries its episode's advantage. With `sequence` normalisation each row's mask is weighted by
1 / (decisions in its episode), so that a token-normalised loss weighs every episode the same.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import numpy as np
import torch

from rlsvc.episode import Episode


@dataclass
class TrainBatch:
    """The rows of one GRPO step, [N, T] each unless said otherwise: what `build_batch` writes, the
    loop completes (`ref_logprobs`, `prox_logprobs`) and the trainer reads."""

    input_ids: torch.Tensor
    """Token ids, right-padded."""
    loss_mask: torch.Tensor
    """Float weights of the sampled tokens (0 elsewhere; with `sequence` normalisation each row's
    are 1 / decisions in its episode)."""
    old_logprobs: torch.Tensor
    """vLLM's (the behaviour policy's) logprob of each sampled token."""
    advantages: torch.Tensor
    """[N]: each row's episode advantage."""
    lengths: torch.Tensor
    """[N]: each row's tokens before its padding."""
    ref_logprobs: torch.Tensor | None = None
    """The frozen reference's logprobs, for the KL term (None without a reference)."""
    prox_logprobs: torch.Tensor | None = None
    """The trainer's own logprobs before the step (the proximal policy, with `grpo.tis_cap`)."""

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def tensors(self) -> dict[str, torch.Tensor]:
        """The fields that are set, by name."""
        return {f.name: v for f in dataclasses.fields(self) if (v := getattr(self, f.name)) is not None}

    def rows(self, index: torch.Tensor | slice, width: int | None = None) -> TrainBatch:
        """The rows at `index`, [N, T] fields cut to `width` columns (all of them: None)."""
        cols = slice(None, width)
        return TrainBatch(**{k: v[index, cols] if v.dim() == 2 else v[index] for k, v in self.tensors().items()})

    def to(self, device: torch.device) -> TrainBatch:
        """The tensors on `device`, but `lengths`, which stay on the host (packing reads them there)."""
        moved = {k: v if k == "lengths" else v.to(device) for k, v in self.tensors().items()}
        return TrainBatch(**moved)

    def split(self, parts: int) -> list[TrainBatch]:
        """`parts` contiguous slices of the rows (data-parallel ranks or minibatches)."""
        bounds = _bounds(len(self), parts)
        return [self.rows(slice(bounds[i], bounds[i + 1])) for i in range(parts)]


def build_batch(episodes: list[Episode], pad_id: int, normalization: str = "token") -> TrainBatch:
    # Rows are gathered as flat lists and scattered into the padded tensors with one numpy
    # assignment per tensor: a batch of 512 BlackJack episodes is ~800 rows, and per-row tensor
    # writes cost the driver's GIL about 12 ms a batch (measured with py-spy, asynchronous job).
    ids_of: list[list[int]] = []
    spans: list[tuple[int, int, list[float], float]] = []  # (row, start, logprobs, mask weight)
    advantages: list[float] = []
    for ep in episodes:
        if ep.continued:
            ids: list[int] = []
            row = len(ids_of)
            for prompt, resp, lps in zip(ep.prompts, ep.responses, ep.logprobs):
                ids += prompt
                spans.append((row, len(ids), lps, 1.0))
                ids += resp
            ids_of.append(ids)
            advantages.append(ep.advantage)
            continue
        weight = 1.0 / max(len(ep.prompts), 1) if normalization == "sequence" else 1.0
        for prompt, resp, lps in zip(ep.prompts, ep.responses, ep.logprobs):
            spans.append((len(ids_of), len(prompt), lps, weight))
            ids_of.append(prompt + resp)
            advantages.append(ep.advantage)
    n = len(ids_of)
    lengths = np.fromiter((len(ids) for ids in ids_of), dtype=np.int64, count=n)
    width = int(lengths.max())
    input_ids = np.full((n, width), pad_id, dtype=np.int64)
    input_ids[_rows(lengths), _columns(lengths, np.zeros(n, dtype=np.int64))] = list(itertools.chain.from_iterable(ids_of))
    span_lengths = np.fromiter((len(lps) for _, _, lps, _ in spans), dtype=np.int64, count=len(spans))
    span_rows = np.fromiter((row for row, *_ in spans), dtype=np.int64, count=len(spans))
    span_starts = np.fromiter((start for _, start, _, _ in spans), dtype=np.int64, count=len(spans))
    where = (np.repeat(span_rows, span_lengths), _columns(span_lengths, span_starts))
    loss_mask = np.zeros((n, width), dtype=np.float32)
    loss_mask[where] = np.repeat(np.fromiter((w for *_, w in spans), dtype=np.float32, count=len(spans)), span_lengths)
    old_logprobs = np.zeros((n, width), dtype=np.float32)
    old_logprobs[where] = list(itertools.chain.from_iterable(lps for _, _, lps, _ in spans))
    return TrainBatch(
        input_ids=torch.from_numpy(input_ids),
        loss_mask=torch.from_numpy(loss_mask),
        old_logprobs=torch.from_numpy(old_logprobs),
        advantages=torch.tensor(advantages, dtype=torch.float32),
        lengths=torch.from_numpy(lengths),
    )


def _rows(lengths: np.ndarray) -> np.ndarray:
    """Row index of every element of runs of `lengths`: [2, 1] -> [0, 0, 1]."""
    return np.repeat(np.arange(len(lengths)), lengths)


def _columns(lengths: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Column of every element of runs of `lengths` beginning at `starts`: ([2, 1], [0, 5]) -> [0, 1, 5]."""
    ends = np.cumsum(lengths)
    return np.arange(int(ends[-1]) if len(ends) else 0) - np.repeat(ends - lengths - starts, lengths)


def _bounds(n: int, parts: int) -> list[int]:
    return [round(i * n / parts) for i in range(parts + 1)]


def split_rows(rows: dict[str, torch.Tensor], parts: int) -> list[dict[str, torch.Tensor]]:
    """Tensors of the same rows (a supervised batch, rows to score) in `parts` contiguous slices."""
    bounds = _bounds(len(next(iter(rows.values()))), parts)
    return [{k: v[bounds[i] : bounds[i + 1]] for k, v in rows.items()} for i in range(parts)]
