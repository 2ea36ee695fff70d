"""The GSM8K GPU configs (configs/gsm8k_*.yaml), checked where there is no GPU, as
tests/unit/test_gpu_configs.py checks the BlackJack ones: each one's `--dry-run` loads its data
(a GSM8K-schema file here in place of the real one), prints the config it resolved and a plan that
fits the GPU overlay's node groups; a real start without GPUs is refused in one line; the tiny CPU
config reads the generator's output."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_deploy_manifests import assert_fits_node_groups
from test_gpu_configs import REFUSAL, gpu_cluster, no_gpu_here  # noqa: F401 - fixtures
from test_reasoning_task import TEST, TRAIN, write_jsonl

from rlsvc.cluster.placement import group_demand, planned
from rlsvc.config import Config, ReasoningEnvConfig, load_config
from rlsvc.reasoning.generate import main as generate
from rlsvc.train import main

REPO = Path(__file__).resolve().parents[2]
GSM8K_CONFIGS = ("gsm8k_qwen2.5_0.5b_instruct", "gsm8k_qwen3_1.7b")


@pytest.mark.parametrize("name", GSM8K_CONFIGS)
def test_dry_run_plan_loads_the_data_and_fits_the_gpu_overlay(name, gpu_cluster, capsys, tmp_path, no_gpu_here):  # noqa: F811
    data = [f"env.data.train={write_jsonl(tmp_path / 'train.jsonl', TRAIN)}", f"env.data.test={write_jsonl(tmp_path / 'test.jsonl', TEST)}"]
    overrides = [*data, f"run.output_dir={tmp_path / 'runs'}"]
    path = REPO / f"configs/{name}.yaml"
    assert main(["--config", str(path), "--dry-run", *overrides]) == 0
    out = capsys.readouterr().out
    printed, _ = out.split(f"rlsvc placement plan ({name})")
    cfg = Config.model_validate(yaml.safe_load(printed.rsplit("\n", 1)[0]))
    assert cfg == load_config(path, overrides) and isinstance(cfg.env, ReasoningEnvConfig)
    assert cfg.grpo.group_size == 5 and cfg.rollout.max_tokens == 1024 and cfg.grpo.kl_coef == 0.001 and cfg.trainer.lr == 1.0e-6
    cpus, gpus = group_demand(planned(cfg))["gpu"]
    gpu_group = assert_fits_node_groups(cfg, gpu_cluster)
    assert gpus >= 3 and gpu_group["GPU"] >= gpus and gpu_group["CPU"] >= cpus
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("name", GSM8K_CONFIGS)
def test_dry_run_without_the_data_names_the_file(name, capsys, tmp_path, no_gpu_here):  # noqa: F811
    missing = tmp_path / "gsm8k" / "train.jsonl"
    assert main(["--config", str(REPO / f"configs/{name}.yaml"), "--dry-run", f"env.data.train={missing}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"env.data.train: no such file: {missing}" in err, err


@pytest.mark.parametrize("name", GSM8K_CONFIGS)
def test_real_start_without_gpus_is_refused_in_one_line(name, capsys, tmp_path, no_gpu_here):  # noqa: F811
    runs = tmp_path / "runs"
    assert main(["--config", str(REPO / f"configs/{name}.yaml"), f"run.output_dir={runs}"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(REFUSAL) and captured.err.count("\n") == 1 and captured.out == ""
    assert not runs.exists()


def test_the_tiny_config_reads_the_generators_output(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the config names data/arith/*.jsonl, relative to where it runs
    assert generate(["--out", "data/arith", "--train", "200", "--test", "20"]) == 0
    capsys.readouterr()
    assert main(["--config", str(REPO / "configs/math_tiny.yaml"), "--dry-run", f"run.output_dir={tmp_path / 'runs'}"]) == 0
    assert f"train: {tmp_path / 'data/arith/train.jsonl'}" in capsys.readouterr().out
