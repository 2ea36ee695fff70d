"""Verifiable rewards for final answers, through math-verify.

Why math-verify (Hugging Face's, 0.9): it decides answer equivalence over sympy (`72` = `72.0`,
`\\frac{1}{2}` = `0.5`, `1,000` = `1000`, sets, intervals, LaTeX), which an exact string match
gets wrong and a hand-written normaliser gets partly right; it came out of lighteval and is what
open-r1's and TRL's accuracy rewards call, so our accuracies read like theirs; and its extraction
(LaTeX, `\\boxed{}`, "the answer is", the last number) serves as the lenient rule peers report
beside the strict one. Alternatives: lm-eval's regex filters compare strings; verl's math scorers
compare strings after hand-written normalisation (Hendrycks' and Minerva's rules); sympy alone
needs a LaTeX parser, which is what math-verify wraps (`latex2sympy2-extended`).

Every completion gets both accuracies: strict (the required format, `rlsvc/reasoning/answers.py`,
then equivalence) and lenient (strict, or else math-verify's own extraction over the whole
completion, then equivalence: a correct strict answer is correct under any lenient reading).
The reward pays for strict correctness by default. `ReasoningReward.__call__` never raises: a
completion with no answer the verifier can read, or one it raises on, scores 0 and is counted in
`counts["malformed"]` (and `counts["verifier_error"]` for the second).
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rlsvc.reasoning.answers import MAX_ANSWER_CHARS, AnswerFormat, extract_strict

PARSE_TIMEOUT_S = 5
"""math-verify's own per-call timeout. It uses signal.alarm, so it applies only on the main
thread; elsewhere it is off and the length cap on extracted answers bounds the work instead."""
MAX_COMPLETION_CHARS = 20_000
"""Lenient extraction reads only the last this many characters of a completion."""


@dataclass(frozen=True)
class Score:
    reward: float
    strict: bool
    """the required final-answer format was followed and its answer is equivalent to the reference"""
    lenient: bool
    """strict, or math-verify's own extraction from the whole completion is equivalent to the reference"""
    formatted: bool
    """the required final-answer format was followed (right or wrong)"""
    malformed: bool = False
    """no answer could be extracted (neither strict nor lenient), or the verifier raised; it
    scored 0 (its format reward too)"""


def _timeout() -> int | None:
    return PARSE_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


def parse_answer(text: str) -> list[Any]:
    """math-verify's parse of an extracted answer (a number or LaTeX), as the reference is parsed."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    configs = [LatexExtractionConfig(), ExprExtractionConfig()]
    return parse(f"${text}$", extraction_config=configs, parsing_timeout=_timeout(), raise_on_error=True)


def parse_completion(text: str) -> list[Any]:
    """math-verify's lenient extraction: boxed, "final answer is", the last LaTeX or number."""
    from math_verify import parse

    return parse(text[-MAX_COMPLETION_CHARS:], parsing_timeout=_timeout(), raise_on_error=True)


def equivalent(gold: list[Any], pred: list[Any]) -> bool:
    from math_verify import verify

    return bool(gold) and bool(pred) and bool(verify(gold, pred, timeout_seconds=_timeout(), raise_on_error=True))


@dataclass
class ReasoningReward:
    """Scores completions against reference final answers (as `extract_strict` gives them).

    reward = correct_reward * (strict if pay_strict_only else lenient) + format_reward * formatted
    """

    answer_format: AnswerFormat = "gsm8k"
    correct_reward: float = 1.0
    format_reward: float = 0.0
    """optional shaping: paid when the required format is followed, right or wrong"""
    pay_strict_only: bool = True
    """pay correctness only in the required format (verl's and lm-eval's strict accuracy)"""
    counts: Counter[str] = field(default_factory=Counter)

    def __call__(self, completion: str, reference: str) -> Score:
        self.counts["scored"] += 1
        try:
            score = self._score(completion, reference)
        except Exception:  # noqa: BLE001 - a reward must never stop training: count and score 0
            self.counts["verifier_error"] += 1
            score = Score(0.0, strict=False, lenient=False, formatted=False, malformed=True)
        self.counts["malformed"] += score.malformed
        return score

    def _score(self, completion: str, reference: str) -> Score:
        gold = parse_answer(reference[:MAX_ANSWER_CHARS])
        found = extract_strict(completion, self.answer_format)
        strict = found is not None and equivalent(gold, parse_answer(found))
        loose = [] if strict else parse_completion(completion)
        lenient = strict or equivalent(gold, loose)
        correct = strict if self.pay_strict_only else lenient
        reward = self.correct_reward * correct + self.format_reward * (found is not None)
        return Score(reward, strict=strict, lenient=lenient, formatted=found is not None, malformed=found is None and not loose)

    def rates(self) -> dict[str, float]:
        """The malformed and verifier-error rates over everything scored so far (for metrics)."""
        n = max(self.counts["scored"], 1)
        return {"malformed_rate": self.counts["malformed"] / n, "verifier_error_rate": self.counts["verifier_error"] / n}
