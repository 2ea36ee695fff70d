"""The generative evaluation on held-out problems during training (`eval.test_every_steps`): the
current policy answers the task's test problems (`Task.test_split`) through the rollout engines,
once greedily and `eval.test_samples` times at the training temperature, and the answers are
scored by the task's strict and lenient rules.

Metrics (`TestEval.run`), each averaged over problems with its standard error over problems
(`rlsvc/evaluation/stats.py`):

- `eval/test/greedy_accuracy`, `eval/test/lenient_accuracy`: the greedy answer strictly right, and
  right under the lenient reading;
- `eval/test/mean_at_k`, `eval/test/pass_at_k` (k = `eval.test_samples`): the share of a problem's
  k samples strictly right, and the unbiased pass@k estimate (at least one right);
- `eval/test/seconds`: the whole evaluation's wall time (both generate calls and the scoring),
  `eval/test/problems`, `eval/test/samples`, `eval/test/tokens` (tokens generated).

The engines are reached through a plain `generate(prompt_ids, seeds) -> [{"text", "token_ids"}]`
callable (the runner's `Generator` protocol), so this module needs neither Ray nor vLLM; the job
(rlsvc/job/test_eval.py) gives it the rollout workers, greedy and sampling.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlsvc.evaluation.stats import mean_and_stderr, mean_at_k, pass_at_k
from rlsvc.task import Prompt, TestSplit

PREFIX = "eval/test/"
CURVES = ("greedy_accuracy", "lenient_accuracy", "mean_at_k", "pass_at_k")
"""The metrics with a standard error (`<name>_stderr` beside each): the curves plots draw."""

Generate = Callable[[list[list[int]], list[int]], list[dict[str, Any]]]
"""(prompts as token ids, one sampling seed each) -> one result per prompt, in order, each with
its completion's `text` and `token_ids` (rlsvc/rollout/runner.py `Generator.generate`)."""


@dataclass(frozen=True)
class TestEvalResult:
    __test__ = False  # not a pytest test class

    metrics: dict[str, float]
    """The metrics of the module's docstring, by their MLflow names."""
    records: list[dict[str, Any]]
    """One per problem: its index, the greedy completion and its verdicts (`strict`, `lenient`),
    and how many of its samples were strictly right (`sampled_right` of `samples`)."""


class TestEval:
    """The evaluation of one test split: its prompts are encoded once, here; `run` asks the
    engines for answers with the weights they hold. Sampling seeds are the same every run (one
    per problem and sample, from `seed`), so two evaluations differ only by the weights."""

    __test__ = False  # not a pytest test class

    def __init__(self, split: TestSplit, encode: Callable[[Prompt], list[int]], samples: int, seed: int) -> None:
        if not split.prompts:
            raise ValueError("the test split has no problems")
        self.split = split
        self.prompt_ids = [encode(p) for p in split.prompts]
        self.samples = samples
        self.seed = seed

    def sample_seeds(self) -> list[int]:
        """Problem i's sample j gets seed `seed * 1_000_003 + i * samples + j` (mod 2**31)."""
        base = self.seed * 1_000_003
        return [(base + i * self.samples + j) % 2**31 for i in range(len(self.prompt_ids)) for j in range(self.samples)]

    def run(self, greedy: Generate, sample: Generate | None = None) -> TestEvalResult:
        """Greedy answers from `greedy`, then `samples` answers a problem from `sample` (the
        engines at the training temperature; needed when `samples` > 0), scored."""
        t0 = time.perf_counter()
        n, k = len(self.prompt_ids), self.samples
        answers = greedy(self.prompt_ids, [0] * n)
        sampled: list[dict[str, Any]] = []
        if k:
            if sample is None:
                raise ValueError(f"{k} samples a problem asked, with no sampling generator")
            sampled = sample([ids for ids in self.prompt_ids for _ in range(k)], self.sample_seeds())
        records = []
        for i, answer in enumerate(answers):
            strict, lenient = self.split.score(i, answer["text"])
            right = sum(self.split.score(i, s["text"])[0] for s in sampled[i * k : (i + 1) * k])
            records.append(
                {"index": i, "greedy": answer["text"], "strict": strict, "lenient": lenient, "sampled_right": right, "samples": k}
            )
        tokens = sum(len(r["token_ids"]) for r in (*answers, *sampled))
        metrics = self.metrics(records) | {"problems": float(n), "samples": float(k), "tokens": float(tokens)}
        metrics["seconds"] = time.perf_counter() - t0
        return TestEvalResult({PREFIX + name: value for name, value in metrics.items()}, records)

    def metrics(self, records: list[dict[str, Any]]) -> dict[str, float]:
        """Each curve's mean over problems and its standard error (mean@k and pass@k only with samples)."""
        values = {
            "greedy_accuracy": [float(r["strict"]) for r in records],
            "lenient_accuracy": [float(r["lenient"]) for r in records],
        }
        if self.samples:
            values["mean_at_k"] = [mean_at_k(self.samples, r["sampled_right"]) for r in records]
            values["pass_at_k"] = [pass_at_k(self.samples, r["sampled_right"], self.samples) for r in records]
        out: dict[str, float] = {}
        for name, per_problem in values.items():
            out[name], out[f"{name}_stderr"] = mean_and_stderr(per_problem)
        return out


def check_settings(cfg: Any, task: Any) -> None:
    """The `eval.test_*` settings against the task and the rollout's temperature, before any
    cluster starts; raises `TaskError`, one line naming the setting."""
    from rlsvc.task import TaskError

    ev = cfg.eval
    if ev.test_every_steps and not task.has("test_split"):
        raise TaskError(f"config error: eval.test_every_steps: task {task.name} has no test_split hook (no test problems); set it to 0")
    if ev.test_every_steps and ev.test_samples and cfg.rollout.temperature <= 0:
        raise TaskError(
            "config error: eval.test_samples: mean@k and pass@k sample at rollout.temperature, which is 0 "
            "(every sample would be the greedy answer); set eval.test_samples=0 or a temperature above 0"
        )
    if ev.select_on_test and not (ev.keep_best and ev.test_every_steps):
        raise TaskError("config error: eval.select_on_test: needs eval.keep_best and eval.test_every_steps > 0")
    if ev.select_on_test and ev.every_steps:
        raise TaskError(
            "config error: eval.select_on_test: the task's validation (eval.every_steps) already picks the kept weights; set one off"
        )
