"""One MLflow run per job: flattened config as params, per-step metrics in batches, artifacts.

The tracking URI comes from the config, else MLFLOW_TRACKING_URI, else a sqlite store in the
working directory (MLflow 3's default backend). A new experiment in a local sqlite store keeps
its artifacts beside the database file (`mlruns/` in the same folder), not under whatever
working directory the job started in, MLflow's default: the store and its artifacts stay
together (a benchmark's store in a temporary folder goes with its artifacts).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

MAX_PARAMS_PER_BATCH = 100  # MLflow's log_batch limit
MAX_METRICS_PER_BATCH = 1000


def resolve_tracking_uri(configured: str | None) -> str:
    return configured or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def artifact_location(tracking_uri: str) -> str | None:
    """Where a new experiment's artifacts go: `mlruns/` beside a local sqlite database; None
    (the server's or MLflow's default) for any other store."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    database = Path(tracking_uri.removeprefix("sqlite:///"))
    return (database.resolve().parent / "mlruns").as_uri()


class MlflowTracker:
    def __init__(
        self, tracking_uri: str, experiment: str, run_name: str, system_metrics_interval_s: float | None = None, run_id: str | None = None
    ) -> None:
        """A new run in `experiment`, or with `run_id` the existing run, reopened (a resumed job)."""
        import mlflow
        from mlflow.tracking import MlflowClient

        mlflow.set_tracking_uri(tracking_uri)
        self.tracking_uri = tracking_uri
        self.client = MlflowClient(tracking_uri)
        if run_id is not None:
            self.client.update_run(run_id, status="RUNNING")
            self.run_id = run_id
        else:
            exp = self.client.get_experiment_by_name(experiment)
            exp_id = exp.experiment_id if exp else self.client.create_experiment(experiment, artifact_location(tracking_uri))
            self.run_id = self.client.create_run(exp_id, run_name=run_name).info.run_id
        self._system = None
        self._pending: list[Any] = []  # asynchronous log_batch operations not waited for yet
        if system_metrics_interval_s:
            # MLflow's own sampler (psutil): CPU, memory, disk and network of the driver's node as
            # system/* metrics, on a background thread until finish()
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            self._system = SystemMetricsMonitor(self.run_id, sampling_interval=system_metrics_interval_s, tracking_uri=tracking_uri)
            self._system.start()

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)) for k, v in sorted(params.items())]
        for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[i : i + MAX_PARAMS_PER_BATCH])

    def log_metrics(self, metrics: dict[str, float], step: int, wait: bool = True) -> None:
        """`wait=False`: queued to MLflow's asynchronous logging (a database write is about 15 ms
        a step against a sqlite store, off the training step this way); `flush` waits for them."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step) for k, v in metrics.items() if v is not None]
        for i in range(0, len(items), MAX_METRICS_PER_BATCH):
            op = self.client.log_batch(self.run_id, metrics=items[i : i + MAX_METRICS_PER_BATCH], synchronous=wait)
            if not wait:
                self._pending.append(op)

    def flush(self) -> None:
        """Wait until every metric logged with `wait=False` is in the store."""
        pending, self._pending = self._pending, []
        for op in pending:
            op.wait()

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        p = Path(path)
        if p.is_dir():
            self.client.log_artifacts(self.run_id, str(p), artifact_path)
        else:
            self.client.log_artifact(self.run_id, str(p), artifact_path)

    def log_policy_model(self, checkpoint: str | Path, example_prompts: list[str], name: str = "policy") -> str:
        """Log the checkpoint folder as an MLflow pyfunc model (`policy_pyfunc.py`) with a
        signature prompt -> completion; returns its `runs:/` URI, which `mlflow.pyfunc.load_model`
        takes. Requirements are given, not inferred: inference would load the model in a subprocess."""
        import mlflow
        import torch
        import transformers

        with mlflow.start_run(run_id=self.run_id, log_system_metrics=False):
            mlflow.pyfunc.log_model(
                name=name,
                python_model=str(Path(__file__).with_name("policy_pyfunc.py")),
                artifacts={"checkpoint": str(checkpoint)},
                code_paths=[str(Path(__file__).parents[1] / "saved_policy.py")],  # the model's prompt encoding, without rlsvc
                input_example=example_prompts,
                pip_requirements=[
                    f"mlflow=={mlflow.__version__}",
                    f"torch=={torch.__version__.split('+')[0]}",
                    f"transformers=={transformers.__version__}",
                ],
            )
        return f"runs:/{self.run_id}/{name}"

    def history(self, key: str) -> tuple[list[int], list[float]]:
        """(steps, values) of a metric logged to this run, by step."""
        self.flush()
        points = sorted(self.client.get_metric_history(self.run_id, key), key=lambda m: m.step)
        return [m.step for m in points], [m.value for m in points]

    def set_tags(self, tags: dict[str, str]) -> None:
        for k, v in tags.items():
            self.client.set_tag(self.run_id, k, v)

    def finish(self, status: str = "FINISHED") -> None:
        self.flush()
        if self._system is not None:
            self._system.finish()
            self._system = None
        self.client.set_terminated(self.run_id, status=status)
