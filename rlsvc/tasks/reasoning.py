"""Reasoning with verifiable rewards as a built-in task (`env.type=reasoning`): a dataset's
problem (GSM8K-style, `rlsvc/reasoning/data.py`), one completion, its final answer checked by
math-verify against the reference (`rlsvc/reasoning/rewards.py`).

Problems come from the train split; `held_out` is the test split, so the job's final evaluation
and `rlsvc eval` report test accuracy. The dataset is loaded and checked where the task is built,
in the driver first (`python -m rlsvc.train`, `--dry-run` included): a data error is one line
naming the setting and the file, before any cluster starts.

Every completion gets a `Score` (strict and lenient correctness, the format followed or not,
malformed); its outcome carries all four, so the per-step metrics (strict and lenient accuracy,
format rate, malformed count) are read from the episodes' outcomes in the driver.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlsvc.buffer.replay import Episode
from rlsvc.config import PromptTemplate
from rlsvc.reasoning.answers import AnswerFormat
from rlsvc.reasoning.data import Problem, load_splits
from rlsvc.reasoning.rewards import ReasoningReward, Score
from rlsvc.single_turn import SingleTurnTask
from rlsvc.task import Prompt, TestSplit, outcome_rates

STRICT = ("correct",)
"""Outcomes that are strictly correct (the required format, an equivalent answer)."""
LENIENT = ("correct", "lenient_formatted", "lenient_unformatted")
"""Outcomes that are correct under the lenient reading."""
FORMATTED = ("correct", "wrong", "lenient_formatted")
"""Outcomes that followed the required final-answer format."""


def outcome_of(score: Score) -> str:
    """One outcome naming the whole score: strict-correct, or the format followed or not, times
    lenient-correct or not, or malformed (nothing to read)."""
    if score.strict:
        return "correct"
    if score.malformed:
        return "malformed"
    if score.lenient:
        return "lenient_formatted" if score.formatted else "lenient_unformatted"
    return "wrong" if score.formatted else "unformatted_wrong"


class ReasoningTask(SingleTurnTask):
    name = "reasoning"
    outcomes = ("correct", "wrong", "lenient_formatted", "lenient_unformatted", "unformatted_wrong", "malformed", "invalid", "truncated")

    def __init__(
        self,
        train: Sequence[Problem],
        test: Sequence[Problem],
        template: PromptTemplate | None = None,
        answer_format: AnswerFormat = "gsm8k",
        reward: ReasoningReward | None = None,
    ) -> None:
        self.problems = list(train)
        self.test = list(test)
        self.template = template or PromptTemplate()
        self.answer_format = answer_format
        self.reward = reward or ReasoningReward(answer_format=answer_format)
        self.chat = self.template.style == "chat"
        self.prompt_format = f"reasoning/{answer_format}-{self.template.style}"
        """Saved with checkpoints (rlsvc.json `prompt`)."""
        # The environment calls `score` then `outcome` for one answer, in one thread, with only
        # the reward in between; the score's other parts wait here for `outcome`.
        self._last = threading.local()

    @classmethod
    def from_config(cls, env: Any) -> ReasoningTask:
        splits = load_splits(env.data, setting="env.data")
        reward = ReasoningReward(
            answer_format=env.data.answer_format,
            correct_reward=env.correct_reward,
            format_reward=env.format_reward,
            pay_strict_only=env.reward == "strict",
        )
        return cls(splits["train"], splits["test"], env.prompt, env.data.answer_format, reward)

    def prompt(self, problem: Problem) -> Prompt:
        return self.template.render(problem.question, self.answer_format)

    def score(self, problem: Problem, answer: str) -> float:
        """The reward; never raises (a completion the verifier cannot read scores 0, `malformed`)."""
        score = self.reward(answer, problem.final)
        self._last.score = score
        return score.reward

    def outcome(self, problem: Problem, reward: float) -> str:
        score = getattr(self._last, "score", None)
        self._last.score = None
        return "malformed" if score is None else outcome_of(score)

    def held_out(self, episodes: int, seed: int) -> Sequence[Problem]:
        """The test split: all of it in order when `episodes` covers it, else a sample drawn with `seed`."""
        if episodes >= len(self.test):
            return self.test
        return random.Random(seed).sample(self.test, episodes)

    def test_split(self, problems: int, seed: int) -> TestSplit:
        """The test split (`held_out`: all of it when `problems` is 0 or covers it, else a sample
        of `problems` drawn with `seed`) for the evaluation during training, scored by the strict
        and lenient rules of the reward (its own instance: the training reward's counts stay
        the training's)."""
        chosen = list(self.held_out(problems or len(self.test), seed))
        rule = ReasoningReward(answer_format=self.answer_format)

        def score(index: int, completion: str) -> tuple[bool, bool]:
            verdict = rule(completion, chosen[index].final)
            return verdict.strict, verdict.lenient

        return TestSplit([self.prompt(p) for p in chosen], score)

    def metrics(self, episodes: list[Episode]) -> dict[str, float]:
        rates = outcome_rates(episodes, self.outcomes)
        return {**rates, **accuracies(rates), "malformed_count": float(sum(ep.outcome == "malformed" for ep in episodes))}

    def evaluate(self, checkpoint: Path, episodes: int, seed: int) -> dict[str, float] | None:
        """The saved policy's greedy completions of the test split (`held_out`), scored: the mean
        reward, each outcome's rate, strict and lenient test accuracy and the format rate."""
        from rlsvc.saved_policy import SavedPolicy

        problems = list(self.held_out(episodes, seed))[:episodes]
        if not problems:
            return None
        completions = SavedPolicy.load(checkpoint).complete([self.prompt(p) for p in problems])
        scores = [self.reward(c, p.final) for p, c in zip(problems, completions)]
        n = len(problems)
        rates = {f"{o}_rate": 0.0 for o in self.outcomes}
        for s in scores:
            rates[f"{outcome_of(s)}_rate"] += 1 / n
        return {"episodes": n, "mean_return": sum(s.reward for s in scores) / n, **rates, **accuracies(rates)}


def accuracies(rates: dict[str, float]) -> dict[str, float]:
    """Strict and lenient accuracy and the format rate from the outcome rates (`<outcome>_rate`)."""

    def total(names: tuple[str, ...]) -> float:
        return sum(rates.get(f"{o}_rate", 0.0) for o in names)

    return {"strict_accuracy": total(STRICT), "lenient_accuracy": total(LENIENT), "format_rate": total(FORMATTED)}
