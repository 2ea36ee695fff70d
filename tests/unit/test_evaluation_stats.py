"""The test-split evaluation's statistics (rlsvc/evaluation/stats.py) against hand-computed values."""

from __future__ import annotations

import math

import pytest

from rlsvc.evaluation.stats import mean_and_stderr, mean_at_k, pass_at_k


def test_unbiased_pass_at_k_by_hand():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)  # one draw: the share right
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(5, 2, 3) == pytest.approx(0.9)  # 1 - C(3,3)/C(5,3) = 1 - 1/10
    assert pass_at_k(10, 3, 2) == pytest.approx(1 - 21 / 45)  # C(7,2) = 21, C(10,2) = 45
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0 and pass_at_k(4, 4, 1) == 1.0  # n = k: any right
    for n, c, k in ((3, 4, 1), (3, 1, 4), (3, 1, 0), (3, -1, 1)):
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)


def test_mean_at_k_and_standard_errors_over_problems_by_hand():
    assert mean_at_k(4, 3) == 0.75 and mean_at_k(1, 0) == 0.0
    with pytest.raises(ValueError):
        mean_at_k(2, 3)
    mean, se = mean_and_stderr([1.0, 0.0, 0.0, 1.0])  # sample variance (0.25 * 4) / 3 = 1/3; se = sqrt(1/3) / 2
    assert mean == 0.5 and se == pytest.approx(math.sqrt(1 / 3) / 2)
    mean, se = mean_and_stderr([0.25, 0.75, 0.5])  # sample variance (1/16 + 1/16) / 2 = 1/16; se = 0.25 / sqrt(3)
    assert mean == 0.5 and se == pytest.approx(0.25 / math.sqrt(3))
    assert mean_and_stderr([0.7]) == (0.7, 0.0) and mean_and_stderr([1.0, 1.0]) == (1.0, 0.0)
    with pytest.raises(ValueError):
        mean_and_stderr([])
