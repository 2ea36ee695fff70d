"""The statistics of a test-split evaluation: per-problem values averaged over problems, each
with its standard error over problems, and the unbiased pass@k estimator (Chen et al. 2021,
"Evaluating Large Language Models Trained on Code", eq. 1)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of the chance that at least one of `k` samples is right, from `n`
    samples of which `c` were right: 1 - C(n - c, k) / C(n, k). With n = k it is 1 when any
    sample was right, else 0."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:  # every draw of k holds a right sample
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_at_k(n: int, c: int) -> float:
    """The share of a problem's `n` samples that were right (its mean@k, k = n)."""
    if not 0 <= c <= n or n < 1:
        raise ValueError(f"mean@k needs 0 <= c <= n and n >= 1 (n={n}, c={c})")
    return c / n


def mean_and_stderr(values: Sequence[float]) -> tuple[float, float]:
    """The mean over problems and its standard error, the sample standard deviation (n - 1 in
    the denominator) over sqrt(n); 0.0 for fewer than two problems (nothing to spread)."""
    if not values:
        raise ValueError("no problems to average")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, statistics.stdev(values, xbar=mean) / math.sqrt(len(values))
