"""ReferenceCache: rows scored once are looked up, only new rows reach the reference, and a
saved cache loads back to the same answers."""

from __future__ import annotations

import torch

from rlsvc.trainer.reference_cache import ReferenceCache


class CountingReference:
    """A deterministic 'reference': logprob at position t is -(token id + t) / 100; counts rows."""

    def __init__(self) -> None:
        self.rows = 0

    def __call__(self, ids: torch.Tensor, allowed: list[int] | None, lengths: torch.Tensor) -> torch.Tensor:
        self.rows += ids.shape[0]
        out = -(ids.float() + torch.arange(ids.shape[1]).float()) / 100
        out[:, 0] = 0.0
        for i, n in enumerate(lengths.tolist()):
            out[i, n:] = 0.0
        return out


def batch(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows)) + 2  # extra padding, as a batch's widest row may be elsewhere
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
    return ids, torch.tensor([len(r) for r in rows])


def test_only_unseen_rows_are_computed_and_answers_match_the_reference():
    ref, cache = CountingReference(), ReferenceCache()
    ids, lengths = batch([[1, 5, 7], [1, 5, 8], [1, 5, 7], [1, 9]])
    first = cache.logprobs(ref, ids, None, lengths)
    assert torch.equal(first, CountingReference()(ids, None, lengths))
    assert ref.rows == 3 and (cache.hits, cache.misses) == (1, 3)  # the repeated row is computed once
    ids2, lengths2 = batch([[1, 9], [1, 5, 8, 2], [1, 5, 7]])
    second = cache.logprobs(ref, ids2, None, lengths2)
    assert torch.equal(second, CountingReference()(ids2, None, lengths2))
    assert ref.rows == 4  # only [1, 5, 8, 2] was new (a longer row is a different key)


def test_the_bound_evicts_least_recently_used_rows_and_state_round_trips():
    ref, cache = CountingReference(), ReferenceCache(max_tokens=6)
    for row in ([1, 2, 3], [4, 5, 6], [7, 8, 9]):  # 9 tokens: the first row leaves
        cache.logprobs(ref, *_args(row))
    assert ref.rows == 3
    cache.logprobs(ref, *_args([7, 8, 9]))
    assert ref.rows == 3
    cache.logprobs(ref, *_args([1, 2, 3]))
    assert ref.rows == 4
    restored = ReferenceCache(max_tokens=6)
    restored.load_state_dict(cache.state_dict())
    ids, lengths = batch([[7, 8, 9], [1, 2, 3]])
    again = CountingReference()
    assert torch.equal(restored.logprobs(again, ids, None, lengths), cache.logprobs(ref, ids, None, lengths))
    assert again.rows == 0  # both rows came back from the saved state
    empty = ReferenceCache()
    empty.load_state_dict(ReferenceCache().state_dict())
    assert empty.state_dict()["lengths"].numel() == 0


def _args(row: list[int]) -> tuple[torch.Tensor, None, torch.Tensor]:
    ids, lengths = batch([row])
    return ids, None, lengths
