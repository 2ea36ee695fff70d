"""Verifiable rewards (rlsvc/reasoning/rewards.py, rlsvc/reasoning/answers.py): strict and lenient
extraction both computed, equivalence by math-verify, the optional format reward, and a reward that
never raises (a property test over arbitrary text)."""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsvc.reasoning.answers import extract_strict, last_boxed
from rlsvc.reasoning.rewards import ReasoningReward, Score


def test_strict_extraction_follows_the_required_format_only():
    assert extract_strict("7+5=<<7+5=12>>12\n#### 12", "gsm8k") == "12"
    assert extract_strict("#### 3\nno, wait\n#### 1,000", "gsm8k") == "1000"  # the last one counts
    assert extract_strict("#### -2.5", "gsm8k") == "-2.5"
    assert extract_strict("the answer is 12", "gsm8k") is None and extract_strict("#### twelve", "gsm8k") is None
    assert extract_strict("so $\\boxed{\\frac{1}{2}}$.", "boxed") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{1} then \\boxed{2") == "1"  # unbalanced last one: the one before
    assert extract_strict("\\boxed{}", "boxed") is None and extract_strict("#### 12", "boxed") is None


@pytest.mark.parametrize(
    ("completion", "reference", "strict", "lenient", "formatted"),
    [
        ("12-3=<<12-3=9>>9 apples.\n#### 9", "9", True, True, True),
        ("#### 9.0", "9", True, True, True),  # equivalence, not string equality
        ("#### 10", "9", False, False, True),
        ("so the answer is 9.", "9", False, True, False),  # right, but not in the required format
        ("He has 12-3=9 apples", "9", False, True, False),
    ],
)
def test_gsm8k_scores(completion, reference, strict, lenient, formatted):
    score = ReasoningReward()(completion, reference)
    assert (score.strict, score.lenient, score.formatted, score.malformed) == (strict, lenient, formatted, False)
    assert score.reward == float(strict)


def test_boxed_equivalence_format_reward_and_lenient_pay():
    reward = ReasoningReward(answer_format="boxed", format_reward=0.1)
    assert reward("\\boxed{0.5}", "\\frac{1}{2}").reward == pytest.approx(1.1)
    assert reward("\\boxed{\\frac{1}{3}}", "\\frac{1}{2}").reward == pytest.approx(0.1)  # format, not correctness
    lenient = ReasoningReward(pay_strict_only=False)
    assert lenient("the answer is 9", "9").reward == 1.0 and ReasoningReward()("the answer is 9", "9").reward == 0.0


def test_unreadable_completions_score_zero_and_are_counted():
    reward = ReasoningReward(format_reward=0.5)
    assert reward("", "9") == Score(0.0, strict=False, lenient=False, formatted=False, malformed=True)
    assert reward("no number here", "9").malformed and not reward("#### 9", "9").malformed
    assert reward.counts["scored"] == 3 and reward.counts["malformed"] == 2
    assert reward.rates() == {"malformed_rate": pytest.approx(2 / 3), "verifier_error_rate": 0.0}


def test_a_verifier_that_raises_scores_zero_and_is_counted(monkeypatch):
    import rlsvc.reasoning.rewards as rewards

    def broken(text):
        raise RecursionError("sympy gave up")

    monkeypatch.setattr(rewards, "parse_answer", broken)
    reward = ReasoningReward()
    assert reward("#### 9", "9").malformed and reward.counts["verifier_error"] == 1 and reward.counts["malformed"] == 1


def test_scoring_off_the_main_thread_works_without_math_verifys_signal_timeout():
    out: list[Score] = []
    thread = threading.Thread(target=lambda: out.append(ReasoningReward()("#### 9", "9")))
    thread.start()
    thread.join()
    assert out[0].strict and not out[0].malformed


MATHY = st.text(alphabet="0123456789#$\\{}()[]^_.,=+-*/ <>boxedfrac sqrt\n", max_size=80)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(completion=st.one_of(st.text(max_size=200), MATHY), reference=st.one_of(st.text(max_size=20), MATHY))
def test_the_reward_never_raises(completion, reference):
    for fmt in ("gsm8k", "boxed"):
        score = ReasoningReward(answer_format=fmt, format_reward=0.1)(completion, reference)
        assert 0.0 <= score.reward <= 1.1
