"""The supervised stage's config and command line (rlsvc/sft/config.py, rlsvc/sft/__main__.py):
the RL job's sections reused, unknown keys and bad values one line naming the field, bad data or
checkpoint one line and exit 2 before Ray, shipped sft_*.yaml files valid."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlsvc.config import ConfigError, ModelConfig, TrainerConfig
from rlsvc.reasoning.data import DatasetSpec
from rlsvc.sft.config import SFTConfig, load_sft_config

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run([sys.executable, "-m", "rlsvc.sft", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def test_every_shipped_sft_config_validates_and_reuses_the_rl_sections():
    paths = sorted((REPO / "configs").glob("sft_*.yaml"))
    assert paths
    for path in paths:
        cfg = load_sft_config(path)
        assert cfg.run.name == path.stem
        assert isinstance(cfg.model, ModelConfig) and isinstance(cfg.trainer, TrainerConfig) and isinstance(cfg.data, DatasetSpec)


def test_defaults_and_output_folder():
    cfg = SFTConfig()
    assert cfg.model.source == "hf" and cfg.max_len == cfg.model.max_seq_len
    assert cfg.run.model_dir() == Path("runs/sft/model")
    assert load_sft_config(None, ["run.out=elsewhere", "sft.max_len=300"]).run.model_dir() == Path("elsewhere")
    assert load_sft_config(None, ["sft.max_len=300"]).max_len == 300


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["sft.bogus=1"], "config error: sft.bogus: Extra inputs are not permitted"),
        (["grpo.kl_coef=0"], "config error: grpo: Extra inputs are not permitted"),
        (["sft.epochs=0"], "config error: sft.epochs: Input should be greater than or equal to 1"),
        (["model.source=scratch"], "config error: config: model.source: rlsvc sft fine-tunes a Hugging Face checkpoint"),
        (["sft.max_len=1024"], "config error: config: sft.max_len (1024) exceeds model.max_seq_len (512)"),
        (["data.answer_format=latex"], "config error: data.answer_format: Input should be 'gsm8k' or 'boxed'"),
    ],
)
def test_bad_settings_are_one_line_naming_the_field(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_sft_config(None, overrides)
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def test_cli_bad_config_is_exit_2_and_one_line_without_heavy_imports():
    out = _run("sft.epochs=-1")
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0
    assert out.stderr.startswith("rlsvc.sft: config error: sft.epochs")
    probe = "import sys, rlsvc.sft.__main__, rlsvc.sft.config; print(sorted(m for m in ('torch','ray','vllm') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO).stdout.strip() == "[]"


def test_cli_missing_data_file_is_exit_2_naming_the_setting_before_ray(tmp_path):
    out = _run(
        f"data.train={tmp_path}/none.jsonl", f"data.test={tmp_path}/none_test.jsonl", f"run.output_dir={tmp_path}/runs", cwd=tmp_path
    )
    assert out.returncode == 2, out.stderr
    line = out.stderr.strip()
    assert "\n" not in line and line.startswith("rlsvc.sft: data") and "none.jsonl" in line
    assert not (tmp_path / "runs").exists() and "Ray" not in out.stdout + out.stderr  # nothing made, no cluster


def test_cli_dry_run_checks_data_and_checkpoint(tmp_path):
    from rlsvc.models.make_tiny_hf import make_tiny_hf
    from rlsvc.reasoning.generate import generate, write

    write(generate(40, 10), tmp_path / "data")
    make_tiny_hf("qwen3", tmp_path / "model")
    common = [f"data.path={tmp_path}/data", f"model.path={tmp_path}/model"]
    out = _run("--dry-run", *common, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "# data: 40 train, 10 test problems" in out.stdout and "tokens_per_batch: 8192" in out.stdout
    too_short = _run("--dry-run", *common, "sft.max_len=20", cwd=tmp_path)
    assert (
        too_short.returncode == 2 and too_short.stderr.strip() == "rlsvc.sft: sft.max_len: all 40 train examples are longer than 20 tokens"
    )
    no_model = _run("--dry-run", f"data.path={tmp_path}/data", f"model.path={tmp_path}/nothing", cwd=tmp_path)
    assert no_model.returncode == 2 and no_model.stderr.startswith("rlsvc.sft: model.path: no such folder")
