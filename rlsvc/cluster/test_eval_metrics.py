"""The test-split evaluation's numbers as a Ray metric (Prometheus through each node's metrics
agent, like rlsvc/cluster/metrics.py's), charted by monitoring/grafana/rlsvc.json's "Test-split
accuracy" panel:

| metric | kind | tags | what it is |
|---|---|---|---|
| rlsvc_test_accuracy | gauge | role=driver, stat | the last test-split evaluation's greedy_accuracy, lenient_accuracy, mean_at_k, pass_at_k |
"""

from __future__ import annotations

from rlsvc.evaluation.test_split import CURVES, PREFIX


class TestEvalGauge:
    """One gauge, a series per statistic, tagged with the run (the run folder's name)."""

    __test__ = False  # not a pytest test class

    def __init__(self, run: str) -> None:
        from ray.util.metrics import Gauge

        self.run = run
        self.gauge = Gauge(
            "rlsvc_test_accuracy", "Test-split accuracy at the last evaluation during training", tag_keys=("role", "run", "stat")
        )

    def record(self, metrics: dict[str, float]) -> None:
        for stat in CURVES:
            if PREFIX + stat in metrics:
                self.gauge.set(float(metrics[PREFIX + stat]), tags={"role": "driver", "run": self.run, "stat": stat})
