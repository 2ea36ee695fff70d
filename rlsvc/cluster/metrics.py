"""Each step's operational numbers as Ray metrics: the Prometheus endpoint of every node's metrics
agent (`--metrics-export-port`) and the Ray dashboard's Metrics view. MLflow keeps the full
record; these are for watching a live cluster. Every series is tagged with the actor role the
number describes and the run (`<run.name>-<timestamp>`, the run folder's name), so several jobs
on one cluster stay apart.

| metric | kind | tags | what it is |
|---|---|---|---|
| rlsvc_episodes_per_second | gauge | role=driver | episodes trained on per wall second, last step |
| rlsvc_tokens_per_second | gauge | role=rollout | tokens sampled per second of rollout, last step |
| rlsvc_mean_return | gauge | role=reward | mean reward of the last step's episodes |
| rlsvc_staleness | gauge | role=buffer, stat=mean/max | policy versions between acting and learning |
| rlsvc_buffer_depth | gauge | role=buffer | episodes left in the replay buffer after sampling |
| rlsvc_weight_sync_seconds | gauge | role=trainer, phase, transport | seconds per weight-sync phase |
| rlsvc_step_phase_seconds | gauge | role=driver, phase | rollout, reward, buffer, reference, train, sync and whole-step seconds |
| rlsvc_env_errors_total | counter | role=env | episodes whose environment failed (their groups were left out) |
| rlsvc_episodes_total | counter | role=driver | episodes played |
| rlsvc_validation_return | gauge | role=driver | greedy return of the policy at the last validation |
| rlsvc_actor_restarts | gauge | role=driver, kind | restarts so far per kind: policy_group, rollout_worker, env, reward, buffer (the fault budgets' count) |
| rlsvc_consecutive_failures | gauge | role=driver, kind | failures in a row without progress per kind (the job stops past its budget) |
| rlsvc_recovery_steps_redone | gauge | role=driver | steps run again after rewinds to a checkpoint, so far |
| rlsvc_recovery_seconds | gauge | role=driver | seconds spent restarting policy actors and backing off, so far |

monitoring/grafana/rlsvc.json charts them (tests/e2e/test_operator_views.py evaluates its queries).
"""

from __future__ import annotations

from typing import Any

# MLflow metric -> step phase
PHASES = {
    "time/rollout_s": "rollout",
    "time/score_s": "reward",
    "time/buffer_s": "buffer",
    "time/reference_s": "reference",
    "time/train_s": "train",
    "time/sync_s": "sync",
    "time/step_s": "step",
}


class RayStepMetrics:
    def __init__(self, run: str, transport: str) -> None:
        from ray.util.metrics import Counter, Gauge

        self.run, self.transport = run, transport
        self.episodes_per_s = Gauge(
            "rlsvc_episodes_per_second", "Episodes trained on per wall second (last step)", tag_keys=("role", "run")
        )
        self.tokens_per_s = Gauge("rlsvc_tokens_per_second", "Tokens sampled per second of rollout (last step)", tag_keys=("role", "run"))
        self.mean_return = Gauge("rlsvc_mean_return", "Mean reward of the last step's episodes", tag_keys=("role", "run"))
        self.staleness = Gauge("rlsvc_staleness", "Policy versions between acting and learning", tag_keys=("role", "run", "stat"))
        self.buffer_depth = Gauge("rlsvc_buffer_depth", "Episodes left in the replay buffer after sampling", tag_keys=("role", "run"))
        self.sync = Gauge(
            "rlsvc_weight_sync_seconds", "Seconds per weight-sync phase (last step)", tag_keys=("role", "run", "phase", "transport")
        )
        self.phase = Gauge("rlsvc_step_phase_seconds", "Seconds per step phase (last step)", tag_keys=("role", "run", "phase"))
        self.env_errors = Counter("rlsvc_env_errors_total", "Episodes whose environment failed", tag_keys=("role", "run"))
        self.episodes = Counter("rlsvc_episodes_total", "Episodes played", tag_keys=("role", "run"))
        self.validation = Gauge("rlsvc_validation_return", "Greedy return at the last validation", tag_keys=("role", "run"))
        self.restarts = Gauge("rlsvc_actor_restarts", "Actor restarts so far, per kind", tag_keys=("role", "run", "kind"))
        self.consecutive = Gauge(
            "rlsvc_consecutive_failures", "Failures in a row without progress, per kind", tag_keys=("role", "run", "kind")
        )
        self.steps_redone = Gauge("rlsvc_recovery_steps_redone", "Steps run again after rewinds, so far", tag_keys=("role", "run"))
        self.recovery_s = Gauge("rlsvc_recovery_seconds", "Seconds spent recovering, so far", tag_keys=("role", "run"))

    def _tags(self, role: str, **more: str) -> dict[str, str]:
        return {"role": role, "run": self.run, **more}

    def record(self, m: dict[str, Any], episodes: int, faults: dict[str, float] | None = None) -> None:
        """One step's metrics (the dict the loop logs to MLflow), how many episodes it played, and
        the fault budgets' numbers (`FaultBudgets.metrics`: `faults/restarts/<kind>`, ...)."""
        self.record_step(m, episodes)
        self.record_faults(faults or {})

    def record_step(self, m: dict[str, Any], episodes: int) -> None:
        step_s = m.get("time/step_s")
        if step_s:
            self.episodes_per_s.set(episodes / step_s, tags=self._tags("driver"))
        if "tokens_per_s" in m:
            self.tokens_per_s.set(float(m["tokens_per_s"]), tags=self._tags("rollout"))
        if "return_mean" in m:
            self.mean_return.set(float(m["return_mean"]), tags=self._tags("reward"))
        for stat in ("mean", "max"):
            if f"staleness_{stat}" in m:
                self.staleness.set(float(m[f"staleness_{stat}"]), tags=self._tags("buffer", stat=stat))
        if "buffer_depth" in m:
            self.buffer_depth.set(float(m["buffer_depth"]), tags=self._tags("buffer"))
        for key, value in m.items():
            if key.startswith("sync/") and isinstance(value, int | float):
                self.sync.set(float(value), tags=self._tags("trainer", phase=key.removeprefix("sync/"), transport=self.transport))
            elif key in PHASES:
                self.phase.set(float(value), tags=self._tags("driver", phase=PHASES[key]))
        if m.get("failed_episodes"):
            self.env_errors.inc(float(m["failed_episodes"]), tags=self._tags("env"))
        if episodes:
            self.episodes.inc(float(episodes), tags=self._tags("driver"))

    def record_faults(self, faults: dict[str, float]) -> None:
        for key, value in faults.items():
            if key.startswith("faults/restarts/"):
                self.restarts.set(float(value), tags=self._tags("driver", kind=key.removeprefix("faults/restarts/")))
            elif key.startswith("faults/consecutive/"):
                self.consecutive.set(float(value), tags=self._tags("driver", kind=key.removeprefix("faults/consecutive/")))
        if "faults/steps_redone" in faults:
            self.steps_redone.set(float(faults["faults/steps_redone"]), tags=self._tags("driver"))
        if "faults/recovery_s" in faults:
            self.recovery_s.set(float(faults["faults/recovery_s"]), tags=self._tags("driver"))

    def validated(self, val_return: float) -> None:
        self.validation.set(float(val_return), tags=self._tags("driver"))
