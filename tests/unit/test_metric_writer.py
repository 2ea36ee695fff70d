"""The MLflow metric writer process (`rlsvc/tracking/metric_writer.py`): what the driver hands it
reaches the store, a flush is a barrier, and a child that fails is reported, never silent."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rlsvc.tracking.metric_writer import MetricWriter, MetricWriterDied, serve
from rlsvc.tracking.mlflow_tracker import MlflowTracker


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_serve_writes_each_step_and_answers_a_flush_after_the_lines_before_it(tmp_path: Path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    t = MlflowTracker(uri, "serve-test", "r")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(uri)
    answers: list[str] = []

    def lines():
        yield json.dumps({"step": 1, "ts": 1000, "metrics": {"loss": 0.5, "nan": math.nan}})
        yield json.dumps({"step": 2, "ts": 2000, "metrics": {"loss": 0.25}})
        yield json.dumps({"flush": 1})
        # the flush was answered only after both steps were in the store
        assert answers == ["1\n"] and len(client.get_metric_history(t.run_id, "loss")) == 2

    serve(t.run_id, lines(), answers.append)
    points = sorted(client.get_metric_history(t.run_id, "loss"), key=lambda m: m.step)
    assert [(m.step, m.value, m.timestamp) for m in points] == [(1, 0.5, 1000), (2, 0.25, 2000)]
    assert math.isnan(client.get_metric_history(t.run_id, "nan")[0].value)
    t.finish()


def test_tracker_with_the_metric_process_logs_flushes_and_stops_it(tmp_path: Path):
    import numpy as np

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    t = MlflowTracker(uri, "writer-test", "r", metric_process=True)
    pid = t._writer._proc.pid
    for step in range(1, 31):
        t.log_metrics({"return_mean": np.float32(step / 10), "skipped": None}, step=step, wait=False)
    assert t.history("return_mean") == (list(range(1, 31)), [pytest.approx(s / 10) for s in range(1, 31)])
    t.log_metrics({"return_mean": 9.0}, step=31, wait=False)
    t.finish()  # writes what is queued, then the child exits
    assert _gone(pid)
    run = MlflowClient(uri).get_run(t.run_id)
    assert run.info.status == "FINISHED" and run.data.metrics["return_mean"] == 9.0
    assert "skipped" not in run.data.metrics


def test_a_failed_writer_is_reported_at_the_flush_and_the_run_ends_failed(tmp_path: Path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    t = MlflowTracker(uri, "dead-writer-test", "r", metric_process=True)
    t._writer.close()
    t._writer = MetricWriter(uri, "no-such-run")  # MLflow refuses the first write
    t.log_metrics({"loss": 1.0}, step=1, wait=False)
    with pytest.raises(MetricWriterDied, match=r"metric writer \(pid \d+\) exited with 1: .*no-such-run"):
        t.flush()
    with pytest.raises(MetricWriterDied):
        t.finish()
    assert MlflowClient(uri).get_run(t.run_id).info.status == "FAILED"


def test_the_tracking_uri_is_not_on_the_childs_command_line(tmp_path: Path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    t = MlflowTracker(uri, "argv-test", "r", metric_process=True)
    cmdline = Path(f"/proc/{t._writer._proc.pid}/cmdline").read_bytes().decode()
    assert str(tmp_path) not in cmdline and t.run_id in cmdline
    t.finish()
