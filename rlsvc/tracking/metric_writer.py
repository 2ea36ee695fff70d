"""A child process that writes a run's per-step metrics to the MLflow store.

Why a process: a `log_batch` of one step's ~60 metrics costs about 11 ms of CPU against a
sqlite store (SQLAlchemy), and MLflow's own asynchronous logging does that work on a thread of
the driver, where it holds the GIL the driver's rollout, scorer and trainer threads need (py-spy
of the tiny asynchronous job: more driver samples than the rollout producer). Here the driver
only writes a JSON line to a pipe.

Protocol, one JSON object per line on the child's stdin:
    {"step": 3, "ts": 1733350000000, "metrics": {"loss": 0.1}}   written with MLflow's log_batch
    {"flush": 7}                                                 answered with "7" on stdout once
                                                                 every line before it is written
End of input (the driver closed the pipe, or died): the child writes what it has and exits.
The tracking URI travels in the environment (MLFLOW_TRACKING_URI), not on the command line,
where any user of the machine could read credentials in it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

MAX_METRICS_PER_BATCH = 1000  # MLflow's log_batch limit


class MetricWriterDied(RuntimeError):
    pass


class MetricWriter:
    """The driver's side: starts the child, sends it metrics, waits for them with `flush`."""

    def __init__(self, tracking_uri: str, run_id: str) -> None:
        package_root = str(Path(__file__).resolve().parents[2])  # rlsvc importable wherever the driver runs
        env = os.environ | {"MLFLOW_TRACKING_URI": tracking_uri}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        self._stderr = tempfile.TemporaryFile()  # read only when the child failed; a pipe could fill and stall it
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "rlsvc.tracking.metric_writer", run_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        self._lock = threading.Lock()
        self._flushes = 0

    def write(self, metrics: dict[str, float], step: int, timestamp_ms: int) -> None:
        line = json.dumps({"step": step, "ts": timestamp_ms, "metrics": metrics}) + "\n"
        with self._lock:
            self._send(line)

    def flush(self) -> None:
        """Return once every metric written before this call is in the store."""
        with self._lock:
            self._flushes += 1
            self._send(json.dumps({"flush": self._flushes}) + "\n")
            answer = self._proc.stdout.readline()
            if answer.strip() != str(self._flushes).encode():
                self._died()

    def close(self, timeout_s: float = 120.0) -> None:
        """Write what is queued and stop the child."""
        with self._lock:
            if self._proc.stdin.closed:
                return
            self._proc.stdin.close()
            self._proc.wait(timeout_s)
            self._proc.stdout.close()
            if self._proc.returncode != 0:
                self._died()
            self._stderr.close()

    def _send(self, line: str) -> None:
        try:
            self._proc.stdin.write(line.encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            self._died()

    def _died(self) -> None:
        self._proc.wait(30)
        self._stderr.seek(0)
        lines = self._stderr.read().decode(errors="replace").strip().splitlines()
        raise MetricWriterDied(
            f"the MLflow metric writer (pid {self._proc.pid}) exited with {self._proc.returncode}: "
            f"{lines[-1] if lines else 'no message'}; metrics logged since the last flush may be missing"
        )


def serve(run_id: str, lines, answer) -> None:
    """The child's loop: `lines` yields protocol lines, `answer(text)` replies to a flush."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient()  # MLFLOW_TRACKING_URI
    for line in lines:
        message = json.loads(line)
        if "flush" in message:
            answer(f"{message['flush']}\n")
            continue
        step, ts = message["step"], message["ts"]
        items = [Metric(k, float(v), ts, step) for k, v in message["metrics"].items()]
        for i in range(0, len(items), MAX_METRICS_PER_BATCH):
            client.log_batch(run_id, metrics=items[i : i + MAX_METRICS_PER_BATCH])


def main() -> None:
    def answer(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    serve(sys.argv[1], sys.stdin, answer)


if __name__ == "__main__":
    main()
