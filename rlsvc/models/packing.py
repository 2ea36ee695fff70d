"""Shared-prefix packing: the trainer's forward passes compute each distinct prefix once.

A GRPO group's samples share their prompt. The default BlackJack batch is 64 groups of 8 rows
of 10 tokens, 9 of them the group's prompt, and no row needs the logits of its last token (they
would predict past it). Packed, each group is one sequence of 9 tokens: 576 tokens through the
model instead of 5120, with the same logits at every position a loss or logprob reads.

One packed sequence holds a prefix and, after it, each row's own tokens past the prefix:

    [prefix (p tokens) | row a: tokens p..n_a-1 | row b: tokens p..n_b-1 | ... | padding]

where n_i = length_i - 1 is the number of positions whose logits row i needs. RoPE positions
restart at p in every row's part, and a dense attention mask lets a row's tokens see the prefix
and their own earlier tokens, never another row's: each row's logits are those of its unpacked
forward (to float rounding: the matmuls have other shapes). Padding sees the prefix and itself,
so no softmax row is empty.

Rows are grouped by sorting them: rows with a common prefix end up next to each other, and
neighbours join one sequence while they share at least half of their tokens and the sequence
stays within a cap (`CAP_FACTORS`). Packing is used only where it cuts the tokens of the pass
(padding included) to `MAX_PACKED_SHARE` of the unpacked ones or fewer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

CAP_FACTORS = (2, 4, 8)
"""A packed sequence holds at most this many times the longest row's tokens; each is tried and
the one with the fewest padded tokens kept (one long sequence pads all the others to its length)."""

MAX_PACKED_LENGTH = 2048
"""And at most this many tokens (or the longest row, if longer): the dense mask of a packed
sequence holds its length squared, and attention under a mask materialises its scores."""

MAX_PACKED_SHARE = 0.75
"""Pack a pass only when its packed tokens are at most this share of its unpacked tokens: the
mask and the gather back cost a little, and a dense mask grows with the square of the length."""


@dataclass
class Packed:
    ids: torch.Tensor
    """[C, L] token ids of the packed sequences."""
    positions: torch.Tensor
    """[C, L] RoPE positions: the token's position in its own row."""
    mask: torch.Tensor
    """[C, 1, L, L] bool: which packed tokens each one attends to."""
    index: torch.Tensor
    """[N, T] where row i's logits at position t are in the packed logits flattened to [C * L]
    (0 for positions whose logits no row needs: a row's last token and its padding)."""


def _clusters(ids: np.ndarray, needed: np.ndarray, order: list[int], cap: int) -> list[tuple[int, list[int]]]:
    """(shared prefix length, rows) of each packed sequence of at most `cap` tokens, the rows
    taken in `order` (sorted by their tokens)."""
    out: list[tuple[int, list[int]]] = []
    p, rows, size = int(needed[order[0]]), [order[0]], int(needed[order[0]])
    for prev, i in zip(order, order[1:], strict=False):
        width = int(min(needed[prev], needed[i]))
        differ = np.nonzero(ids[prev, :width] != ids[i, :width])[0]
        common = int(differ[0]) if len(differ) else width
        shared = min(p, common)
        grown = size + (p - shared) * (len(rows) - 1) + int(needed[i]) - shared
        if common * 2 >= max(width, 1) and shared > 0 and grown <= cap:
            p, size = shared, grown
            rows.append(i)
        else:
            out.append((p, rows))
            p, rows, size = int(needed[i]), [i], int(needed[i])
    out.append((p, rows))
    return out


def plan(ids: torch.Tensor, lengths: torch.Tensor) -> Packed | None:
    """The packing of right-padded rows `ids` [N, T] with `lengths` [N]; None when it would not
    cut the pass's tokens to `MAX_PACKED_SHARE` (the caller runs the rows as they are)."""
    n, width = ids.shape
    needed = np.clip(lengths.cpu().numpy().astype(np.int64) - 1, 1, width)
    if n < 2:
        return None
    tokens = ids.cpu().numpy()
    order = sorted(range(n), key=lambda i: tokens[i, : needed[i]].tobytes())
    # the longest sequence sets the padded length of all: the cap with the fewest padded tokens
    longest = int(needed.max())
    caps = sorted({min(factor * longest, max(longest, MAX_PACKED_LENGTH)) for factor in CAP_FACTORS})
    options = [_clusters(tokens, needed, order, cap) for cap in caps]
    lengths_of = [max(p + sum(int(needed[i]) - p for i in rows) for p, rows in c) for c in options]
    best = min(range(len(options)), key=lambda k: len(options[k]) * lengths_of[k])
    clusters, length = options[best], lengths_of[best]
    if len(clusters) * length > MAX_PACKED_SHARE * n * width:
        return None
    packed = np.zeros((len(clusters), length), dtype=tokens.dtype)
    positions = np.zeros((len(clusters), length), dtype=np.int64)
    segment = np.full((len(clusters), length), -1, dtype=np.int64)  # -1: the prefix
    index = np.zeros((n, width), dtype=np.int64)
    for c, (p, rows) in enumerate(clusters):
        base = c * length
        packed[c, :p] = tokens[rows[0], :p]
        positions[c, :p] = np.arange(p)
        at = p
        for i in rows:
            m = int(needed[i]) - p
            packed[c, at : at + m] = tokens[i, p : p + m]
            positions[c, at : at + m] = np.arange(p, p + m)
            segment[c, at : at + m] = i
            index[i, :p] = base + np.arange(p)
            index[i, p : p + m] = base + at + np.arange(m)
            at += m
        segment[c, at:] = n + np.arange(length - at)  # padding: a segment of its own per token
    seg = torch.from_numpy(segment)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    mask = causal & ((seg[:, None, :] == -1) | (seg[:, None, :] == seg[:, :, None]))
    return Packed(
        ids=torch.from_numpy(packed).to(ids.device),
        positions=torch.from_numpy(positions).to(ids.device),
        mask=mask.unsqueeze(1).to(ids.device),
        index=torch.from_numpy(index).to(ids.device),
    )


def unpack(logits: torch.Tensor, packed: Packed) -> torch.Tensor:
    """The packed logits [C, L, V] back in the rows' layout [N, T, V]."""
    flat = logits.reshape(-1, logits.shape[-1])
    n, width = packed.index.shape
    return flat.index_select(0, packed.index.reshape(-1)).reshape(n, width, -1)
