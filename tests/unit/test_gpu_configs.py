"""The GPU configs (pretrained Qwen checkpoints on GPU nodes), checked where there is no GPU:
each one's `--dry-run` plan fits the GPU overlay's node groups, and starting it for real on a
machine without GPUs and without a cluster to join is refused in one line before anything is
downloaded, started or written. What runs them on GPUs: scripts/gpu_smoke.sh."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from deploy_shapes import render_kustomize
from test_deploy_manifests import OVERLAYS, assert_fits_node_groups, one

from rlsvc.cluster.placement import group_demand, planned
from rlsvc.config import Config, load_config
from rlsvc.train import gpu_refusal, local_gpu_count, main

REPO = Path(__file__).resolve().parents[2]
GPU_CONFIGS = ("blackjack_qwen2.5_1.5b", "blackjack_qwen3_1.7b", "code_qwen2.5_1.5b", "blackjack_qwen2.5_1.5b_lora")
GPU_OVERLAY = OVERLAYS["gpu-qwen2.5-1.5b"]
REFUSAL = "rlsvc.train: this config reserves GPUs (rollout 1 x 1 GPU, trainer 2 x 1 GPU) and this machine has none; "


def path_without_nvidia_smi(*first: Path) -> str:
    """PATH with `first` in front and without the folders that hold an nvidia-smi, so a test
    sees the same machine on a GPU box as on a CPU one."""
    rest = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "nvidia-smi").exists()]
    return os.pathsep.join([*map(str, first), *rest])


@pytest.fixture
def no_gpu_here(monkeypatch) -> None:
    """This machine as one without GPUs and without a cluster to join."""
    monkeypatch.setenv("PATH", path_without_nvidia_smi())
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def fake_nvidia_smi(folder: Path, script: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\n{script}\n")
    exe.chmod(0o755)
    return folder


@pytest.fixture(scope="module")
def gpu_cluster() -> dict:
    """The RayCluster of the GPU overlay (kuberay/overlays/gpu-qwen2.5-1.5b)."""
    return one(render_kustomize(GPU_OVERLAY), "RayCluster")


@pytest.mark.parametrize("name", GPU_CONFIGS)
def test_dry_run_plan_fits_the_gpu_overlay(name, gpu_cluster, capsys, tmp_path, no_gpu_here):
    """`--dry-run` works without a GPU, prints the config it resolved and a plan whose GPU
    group total is the config's demand, and that config fits the overlay's node groups."""
    path = REPO / f"configs/{name}.yaml"
    assert main(["--config", str(path), "--dry-run", f"run.output_dir={tmp_path / 'runs'}"]) == 0
    out = capsys.readouterr().out
    printed, table = out.split(f"rlsvc placement plan ({name})")
    cfg = Config.model_validate(yaml.safe_load(printed.rsplit("\n", 1)[0]))
    assert cfg == load_config(path, [f"run.output_dir={tmp_path / 'runs'}"])
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]] for line in table.splitlines() if line.startswith("│")}
    cpus, gpus = group_demand(planned(cfg))["gpu"]
    assert rows["gpu group total"][-2:] == [f"{cpus:g}", f"{gpus:g}"] and gpus >= 3
    gpu_group = assert_fits_node_groups(cfg, gpu_cluster)
    assert gpu_group["GPU"] >= gpus and gpu_group["CPU"] >= cpus
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("name", GPU_CONFIGS)
def test_real_start_without_gpus_is_refused_in_one_line(name, capsys, tmp_path, no_gpu_here):
    runs = tmp_path / "runs"
    assert main(["--config", str(REPO / f"configs/{name}.yaml"), f"run.output_dir={runs}"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(REFUSAL) and captured.err.count("\n") == 1 and captured.out == ""
    assert "cluster.address=ray://" in captured.err and "KubeRay RayJob" in captured.err
    assert not runs.exists()  # no run folder, no tiny model, no download cache under it


def test_the_cli_refuses_at_once_before_any_download(tmp_path):
    """The same through `python -m rlsvc.train`: exit 2 within seconds (no hub download, no
    local Ray cluster), stderr one line, nothing written."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PATH"] = path_without_nvidia_smi()
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "rlsvc.train", "--config", "configs/blackjack_qwen3_1.7b.yaml", f"run.output_dir={tmp_path / 'runs'}"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
    )
    assert out.returncode == 2 and out.stderr.startswith(REFUSAL) and out.stderr.count("\n") == 1, out.stderr
    assert time.perf_counter() - t0 < 15.0  # an interpreter start and a config parse; a loaded CI box gets the margin
    assert not (tmp_path / "runs").exists()


def test_the_check_stands_aside_when_a_cluster_or_gpus_are_there(tmp_path, monkeypatch, no_gpu_here):
    cfg = load_config(REPO / "configs/blackjack_qwen3_1.7b.yaml")
    assert gpu_refusal(cfg) is not None
    assert gpu_refusal(load_config(REPO / "configs/blackjack_qwen3_1.7b.yaml", ["cluster.address=ray://head:10001"])) is None
    assert gpu_refusal(load_config(REPO / "configs/blackjack_hf_tiny.yaml")) is None  # reserves no GPU
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")  # `ray job submit` names the cluster this way
    assert gpu_refusal(cfg) is None
    monkeypatch.delenv("RAY_ADDRESS")

    gpus = fake_nvidia_smi(tmp_path / "gpus", "echo 'GPU 0: NVIDIA H100 (UUID: GPU-0)'; echo 'GPU 1: NVIDIA H100 (UUID: GPU-1)'")
    monkeypatch.setenv("PATH", path_without_nvidia_smi(gpus))
    assert local_gpu_count() == 2 and gpu_refusal(cfg) is None
    # an nvidia-smi that cannot reach a driver: not known to have none, so Ray decides
    broken = fake_nvidia_smi(tmp_path / "broken", "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    monkeypatch.setenv("PATH", path_without_nvidia_smi(broken))
    assert local_gpu_count() is None and gpu_refusal(cfg) is None
    none = fake_nvidia_smi(tmp_path / "none", "echo 'No devices were found'; exit 6")  # a driver, no GPU passed through
    monkeypatch.setenv("PATH", path_without_nvidia_smi(none))
    assert local_gpu_count() == 0 and gpu_refusal(cfg) is not None
