"""The step's operational numbers as Ray metrics (Prometheus, the Ray dashboard's Metrics view):
weight-sync phases per transport, staleness, and idle fractions. MLflow keeps the full record;
these are for watching a live cluster."""

from __future__ import annotations

from typing import Any

_PREFIXES = ("sync/", "staleness", "trainer_idle", "rollout_idle", "time/step_s", "mismatch_kl")


class RayStepMetrics:
    def __init__(self, transport: str) -> None:
        from ray.util.metrics import Gauge

        self.tags = {"transport": transport}
        self.sync = Gauge("rlsvc_weight_sync_seconds", "Seconds per weight-sync phase (last step)", tag_keys=("phase", "transport"))
        self.step = Gauge("rlsvc_step_value", "Per-step staleness, idle fractions, step time, mismatch KL", tag_keys=("name", "transport"))

    def record(self, metrics: dict[str, Any]) -> None:
        for key, value in metrics.items():
            if not key.startswith(_PREFIXES) or not isinstance(value, int | float):
                continue
            if key.startswith("sync/"):
                self.sync.set(float(value), tags={**self.tags, "phase": key.removeprefix("sync/")})
            else:
                self.step.set(float(value), tags={**self.tags, "name": key})
