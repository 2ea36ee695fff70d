"""Reference logprobs remembered per row: the reference policy is frozen, so a row of tokens it
has scored once has the same logprobs every time it comes back.

In a task with few states (BlackJack in turn context: about 280 states times 2 answers) nearly
every row of a step has been seen before, and the reference phase of a step becomes a table
lookup; a task whose rows never repeat (code, long multi-turn episodes) pays only the hashing.
Only the rows not cached go to the reference model, in one call, deduplicated.

A cached row's logprobs were computed in another batch, whose padding and micro-batches differ:
equal to about 1e-7 (float rounding), not bit for bit. The cache holds at most `max_tokens`
tokens (least recently used rows leave first) and must be cleared when the reference's weights
change (`clear`). It is thread-safe: the asynchronous loop's scorer thread fills it with each
batch's rows (`AsyncGRPOLoop.score_batch`) while the trainer thread reads it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import torch

Logprobs = Callable[[torch.Tensor, list[int] | None, torch.Tensor], torch.Tensor]


class ReferenceCache:
    def __init__(self, max_tokens: int = 1 << 22) -> None:
        """`max_tokens`: rows kept, in tokens (each costs 8 bytes of key and 4 of logprobs)."""
        self.max_tokens = max_tokens
        self._rows: OrderedDict[bytes, torch.Tensor] = OrderedDict()  # token ids as int64 bytes -> logprobs
        self._tokens = 0
        self._lock = threading.RLock()
        self.hits = 0
        """Rows answered from the cache since it was made."""
        self.misses = 0
        """Rows the reference model computed."""

    def logprobs(self, compute: Logprobs, input_ids: torch.Tensor, allowed: list[int] | None, lengths: torch.Tensor) -> torch.Tensor:
        """`compute(input_ids, allowed, lengths)`'s [N, T] answer, computing only rows not cached
        (`allowed` must be the same on every call: it is not part of the key). The lock is not
        held while `compute` runs, so a lookup never waits for another thread's reference call."""
        n, width = input_ids.shape
        ids = input_ids.to(torch.int64).numpy()
        keys = [ids[i, : int(lengths[i])].tobytes() for i in range(n)]
        found: dict[bytes, torch.Tensor] = {}
        with self._lock:
            for k in keys:  # taken out first: adding the new rows below may evict cached ones
                if k not in found and k in self._rows:
                    self._rows.move_to_end(k)
                    found[k] = self._rows[k]
        todo = [k for k in dict.fromkeys(keys) if k not in found]
        if todo:
            rows = [torch.frombuffer(bytearray(k), dtype=torch.int64) for k in todo]
            fresh = torch.zeros((len(todo), max(len(r) for r in rows)), dtype=torch.int64)
            for i, r in enumerate(rows):
                fresh[i, : len(r)] = r
            computed = compute(fresh, allowed, torch.tensor([len(r) for r in rows]))
            with self._lock:
                for i, (k, r) in enumerate(zip(todo, rows)):
                    found[k] = computed[i, : len(r)].clone()
                    self._put(k, found[k])
        out = torch.zeros((n, width), dtype=torch.float32)
        for i, k in enumerate(keys):
            out[i, : len(k) // 8] = found[k]
        with self._lock:
            self.misses += len(todo)
            self.hits += n - len(todo)
        return out

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()
            self._tokens = 0

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The cached rows, least recently used first, as three flat tensors. A training
        checkpoint saves them: a resumed job then computes exactly the rows the uninterrupted
        one would have, in the same batches, so their steps stay bit-identical."""
        with self._lock:
            rows = list(self._rows.items())
        return {
            "token_ids": torch.frombuffer(bytearray(b"".join(k for k, _ in rows)), dtype=torch.int64)
            if rows
            else torch.zeros(0, dtype=torch.int64),
            "logprobs": torch.cat([v for _, v in rows]) if rows else torch.zeros(0),
            "lengths": torch.tensor([len(v) for _, v in rows], dtype=torch.int64),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        ids, logprobs = state["token_ids"].split(state["lengths"].tolist()), state["logprobs"].split(state["lengths"].tolist())
        with self._lock:
            self.clear()
            for k, v in zip(ids, logprobs, strict=True):
                self._put(k.numpy().tobytes(), v.clone())

    def _put(self, key: bytes, row: torch.Tensor) -> None:
        self._rows[key] = row
        self._tokens += len(row)
        while self._tokens > self.max_tokens and self._rows:
            _, old = self._rows.popitem(last=False)
            self._tokens -= len(old)
