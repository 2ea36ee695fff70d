"""notebooks/quickstart.ipynb, executed top to bottom by nbclient: it trains the tiny default for a
few steps through the real job, evaluates the checkpoint, shows the strategy and transcripts, and
loads the policy back from MLflow. (compare_runs.ipynb runs in test_code_training.py, on the two
real runs made there.)"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_quickstart_notebook(tmp_path: Path, run_notebook):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    text, pngs = run_notebook("quickstart.ipynb", {"RLSVC_NB_STEPS": "3", "RLSVC_NB_WORKDIR": str(tmp_path), "MLFLOW_TRACKING_URI": uri,
                                               "RLSVC_NB_EVAL_EPISODES": "2000", "RAY_AUTH_MODE": "disabled"})
    assert pngs == 1  # the run's reward curve
    assert "rlsvc run summary" in text and "trained policy" in text and "stick at 17" in text
    assert "player sum" in text and "logprob" in text and "runs:/" in text
    assert len(list((tmp_path / "runs").glob("blackjack_tiny-*/checkpoint/model.safetensors"))) == 1
