"""The method every comparison here follows: the two sides alternate in one run (A B, B A, A B,
...: the order flips each pair, so neither side always runs on a machine just warmed or just
cooled by the other), each pair gives one ratio, and the result is the median of the per-pair
ratios with their min and max. This machine's speed drifts by up to a third within minutes;
timing all of A, then all of B, measures the drift as much as the code."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def alternate(a: Callable[[int], object], b: Callable[[int], object], pairs: int, warmup: int = 1) -> list[dict[str, float]]:
    """Run `a(k)` and `b(k)` for pair k = 0..pairs-1, order flipped every pair, after `warmup`
    untimed calls of each (the first calls of a shape are slow: allocations, kernel choice).
    Returns per pair the seconds of each side and `ratio` = b seconds / a seconds (how many
    times faster a is)."""
    for k in range(warmup):
        a(-1 - k)
        b(-1 - k)
    out = []
    for k in range(pairs):
        seconds = {}
        for name, fn in (("a", a), ("b", b)) if k % 2 == 0 else (("b", b), ("a", a)):
            t0 = time.perf_counter()
            fn(k)
            seconds[name] = time.perf_counter() - t0
        out.append({"a_s": seconds["a"], "b_s": seconds["b"], "ratio": seconds["b"] / seconds["a"]})
    return out
