"""Jobs the cluster cannot run are refused in one line with exit status 2, after joining the
cluster and before any actor starts, instead of waiting forever for resources."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.integration


def test_more_gpus_than_the_cluster_has_is_refused_before_any_actor(tmp_path, mlflow_uri):
    """On a machine whose `nvidia-smi` lists a GPU that Ray does not get (here a stand-in script;
    without one, rlsvc.train refuses a GPU config before starting a cluster), the placement check
    on the joined cluster refuses it."""
    uri = mlflow_uri
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: stand-in (UUID: GPU-0)'\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    t0 = time.time()
    out = subprocess.run(
        [sys.executable, "-m", "rlsvc.train", "rollout.num_gpus=1", f"run.output_dir={tmp_path / 'runs'}", f"tracking.tracking_uri={uri}"],
        cwd=tmp_path,
        env={**os.environ, "RAY_AUTH_MODE": "disabled", "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-3000:]
    [line] = [ln for ln in out.stderr.splitlines() if ln.startswith("rlsvc.train:")]
    assert "rlsvc-rollout-0 (" in line and " 1 GPU" in line and "fits on no node" in line and "0 GPU" in line
    assert "Traceback" not in out.stderr
    assert time.time() - t0 < 240  # a refusal, not a wait for a GPU that never comes

    from mlflow.tracking import MlflowClient

    [run] = MlflowClient(uri).search_runs([MlflowClient(uri).get_experiment_by_name("blackjack_tiny").experiment_id])
    assert run.info.status == "FAILED"  # the run says the job did not happen
