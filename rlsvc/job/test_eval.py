"""The job's side of the test-split evaluation during training (`eval.test_every_steps`;
rlsvc/evaluation/test_split.py does the asking and the scoring): the task's test problems,
encoded once at start-up; before the first step (the curves' start point) and after a due step, a wait until every rollout engine holds that step's
weights, then the evaluation on the rollout workers, greedy and at the training temperature.
Its metrics go to MLflow at the step and to the `rlsvc_test_accuracy` gauge, its answers to
`test_eval.jsonl` in the run folder (one line per problem and evaluation).

The synchronous loop's step ends with the weights pushed to every engine. The asynchronous
loop's trainer only stages them: its producer loads them between two rounds of generation, so
the evaluation waits for the producer's engine version to reach the step. Nothing newer is
staged while it runs (the trainer thread is the one evaluating), so the engines keep that version;
the producer's own generate calls go on meanwhile, interleaved with the evaluation's on the
same workers."""

from __future__ import annotations

import json
import time
from typing import Any

from rlsvc.cluster.fleet import RayGenerator
from rlsvc.cluster.test_eval_metrics import TestEvalGauge
from rlsvc.evaluation.test_split import TestEval, TestEvalResult
from rlsvc.job.state import Live


def engines_hold(loop: Any, version: int, timeout_s: float = 600.0) -> None:
    """Return once the rollout engines hold policy `version`: at once for the synchronous loop
    (its step pushed it), else when the asynchronous producer has loaded it."""
    producer = getattr(loop, "producer", None)
    if producer is None:  # the synchronous loop, or an asynchronous one between producers (synced by its recovery)
        return
    deadline = time.monotonic() + timeout_s
    while producer.engine_version < version:
        if producer.stopped or time.monotonic() > deadline:
            raise RuntimeError(
                f"eval.test_every_steps: the rollout engines did not load policy version {version} "
                f"(they hold {producer.engine_version}{', the producer stopped' if producer.stopped else f' after {timeout_s:.0f} s'})"
            )
        time.sleep(0.01)


class JobTestEval:
    """The test-split evaluation of one job (built only when `eval.test_every_steps` > 0)."""

    def __init__(self, live: Live) -> None:
        cfg = live.cfg
        self.live, self.every, self.last_step = live, cfg.eval.test_every_steps, cfg.run.steps
        split = live.job.task.test_split(cfg.eval.test_problems, cfg.eval.seed)
        assert split is not None, "eval.test_every_steps > 0 with a task that has no test_split hook (train.py checks this)"
        self.eval = TestEval(split, live.codec.tokens, cfg.eval.test_samples, cfg.eval.seed)
        self.gauge = TestEvalGauge(live.folder.name)
        self.path = live.folder.local / "test_eval.jsonl"

    def due(self, version: int) -> bool:
        """Every `eval.test_every_steps` steps, and after the last step (the curve ends at the policy saved)."""
        return version % self.every == 0 or version == self.last_step

    def __call__(self) -> TestEvalResult:
        """Evaluate the policy the loop is at; logged at its version."""
        live, loop = self.live, self.live.loop
        t0 = time.perf_counter()
        engines_hold(loop, loop.version)
        workers = live.svc.generator.workers  # the job's list: a replaced worker is used from the next call
        result = self.eval.run(RayGenerator(workers, greedy=True).generate, RayGenerator(workers).generate)
        result.metrics["eval/test/seconds"] = time.perf_counter() - t0  # the wait for the engines included
        live.tracker.log_metrics(result.metrics, step=loop.version)
        self.gauge.record(result.metrics)
        with self.path.open("a") as f:
            for record in result.records:
                f.write(json.dumps({"step": loop.version, **record}) + "\n")
        return result
