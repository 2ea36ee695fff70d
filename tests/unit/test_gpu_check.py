"""scripts/gpu_check.py, the learner's checks for a GPU machine, holds on CPU too: the same checks
run here with `--device cpu`, so the script a GPU run depends on is tested in every CI run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_check_holds_on_cpu_and_is_reported(tmp_path):
    out = tmp_path / "gpu_check.json"
    run = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--device", "cpu", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["passed"] and report["device"] == "cpu" and report["fsdp_DataParallelMeshDims"] == "torch"
    assert [f["family"] for f in report["families"]] == ["qwen3", "llama", "qwen2"]
    for family in report["families"]:
        assert family["dtype"] == "bfloat16"
        assert max(family[k] for k in ("float32_vs_hf", "float32_packed_vs_hf", "float32_split_vs_hf", "export_vs_hf")) < 2e-4
        assert family["response_logprob_gain"][0] > 0 > max(family["response_logprob_gain"][1:])
        assert family["resume_max_weight_diff"] < 1e-5


def test_no_cuda_is_one_line_and_exit_2():
    """Asked for CUDA where torch sees none (this CPU machine), it says so before any work."""
    run = subprocess.run([sys.executable, "scripts/gpu_check.py"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.strip() == "gpu_check: torch sees no CUDA device (use --device cpu to run the checks on CPU)"


def test_a_failing_check_is_named_and_exits_1(tmp_path, monkeypatch, capsys):
    """With a float32 tolerance no two kernels meet, the first check fails by name."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    monkeypatch.setattr(gpu_check, "FLOAT32_ATOL", 0.0)
    out = tmp_path / "gpu_check.json"
    assert gpu_check.main(["--device", "cpu", "--families", "qwen3", "--out", str(out)]) == 1
    report = json.loads(out.read_text())
    assert not report["passed"] and report["failed"].startswith("qwen3: float32_vs_hf: float32 logprobs differ")
    assert "gpu_check: FAILED: qwen3: float32_vs_hf" in capsys.readouterr().err
