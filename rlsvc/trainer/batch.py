"""Episodes -> the padded tensors a trainer step takes.

Each decision of an episode is one row: its prompt followed by the sampled tokens; an episode
played as one token sequence (`Episode.continued`) is one row, the loss on every turn's sampled
tokens. Every row carries its episode's advantage. With `sequence` normalisation each row's mask is weighted by
1 / (decisions in its episode), so that a token-normalised loss weighs every episode the same.
"""

from __future__ import annotations

import torch

from rlsvc.buffer.replay import Episode


def build_batch(episodes: list[Episode], pad_id: int, normalization: str = "token") -> dict[str, torch.Tensor]:
    rows: list[tuple[list[int], list[tuple[int, list[float]]], float, float]] = []  # ids, (start, logprobs) spans
    for ep in episodes:
        if ep.continued:
            ids: list[int] = []
            spans = []
            for prompt, resp, lps in zip(ep.prompts, ep.responses, ep.logprobs):
                ids += prompt
                spans.append((len(ids), lps))
                ids += resp
            rows.append((ids, spans, ep.advantage, 1.0))
            continue
        weight = 1.0 / max(len(ep.prompts), 1) if normalization == "sequence" else 1.0
        for prompt, resp, lps in zip(ep.prompts, ep.responses, ep.logprobs):
            rows.append((prompt + resp, [(len(prompt), lps)], ep.advantage, weight))
    width = max(len(ids) for ids, *_ in rows)
    n = len(rows)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    loss_mask = torch.zeros((n, width), dtype=torch.float32)
    old_logprobs = torch.zeros((n, width), dtype=torch.float32)
    advantages = torch.zeros(n, dtype=torch.float32)
    lengths = torch.tensor([len(ids) for ids, *_ in rows], dtype=torch.long)  # before the padding
    for i, (ids, spans, adv, weight) in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        for start, lps in spans:
            loss_mask[i, start : start + len(lps)] = weight
            old_logprobs[i, start : start + len(lps)] = torch.tensor(lps, dtype=torch.float32)
        advantages[i] = adv
    return {"input_ids": input_ids, "loss_mask": loss_mask, "old_logprobs": old_logprobs, "advantages": advantages, "lengths": lengths}


def split_batch(batch: dict[str, torch.Tensor], parts: int) -> list[dict[str, torch.Tensor]]:
    """Split rows into `parts` contiguous slices (data-parallel ranks or minibatches)."""
    n = batch["input_ids"].shape[0]
    bounds = [round(i * n / parts) for i in range(parts + 1)]
    return [{k: v[bounds[i] : bounds[i + 1]] for k, v in batch.items()} for i in range(parts)]
