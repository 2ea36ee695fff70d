"""Bad pretrained-model input to `rlsvc.train`: each is one line on stderr and exit status 2,
before any cluster starts and without a run folder (rlsvc/models/pretrained.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlsvc.models.make_tiny_hf import make_tiny_hf
from rlsvc.train import main

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "blackjack_hf_tiny.yaml"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_tiny_hf("qwen3", tmp_path_factory.mktemp("m") / "qwen3")


def edited(tiny: Path, where: Path, edit) -> Path:
    folder = where / "edited"
    shutil.copytree(tiny, folder)
    edit(folder)
    return folder


def set_config(**changes):
    def edit(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        config.update(changes)
        (folder / "config.json").write_text(json.dumps(config))

    return edit


def drop_chat_template(folder: Path) -> None:
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def refused(capsys, tmp_path: Path, path: str, *overrides: str) -> str:
    runs = tmp_path / "runs"
    code = main(["--config", str(CONFIG), f"model.path={path}", f"run.output_dir={runs}", *overrides])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1 and err[0].startswith("rlsvc.train: "), err
    assert not runs.exists() or not [p for p in runs.iterdir() if p.name.startswith("blackjack_hf_tiny-")]
    return err[0]


def test_a_missing_folder(capsys, tmp_path):
    assert "no such folder" in refused(capsys, tmp_path, str(tmp_path / "nowhere"))


def test_a_folder_that_is_not_a_checkpoint(capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    assert "has no config.json" in refused(capsys, tmp_path, str(tmp_path / "empty"))


def test_an_unsupported_model_type_lists_the_supported(capsys, tmp_path, tiny):
    line = refused(capsys, tmp_path, str(edited(tiny, tmp_path, set_config(model_type="gpt2"))))
    assert "'gpt2' is not supported" in line and "qwen3, llama, qwen2" in line


def test_a_tokenizer_without_a_chat_template(capsys, tmp_path, tiny):
    line = refused(capsys, tmp_path, str(edited(tiny, tmp_path, drop_chat_template)))
    assert "no chat template" in line and "env.chat" in line


def test_a_vocabulary_larger_than_the_embedding(capsys, tmp_path, tiny):
    line = refused(capsys, tmp_path, str(edited(tiny, tmp_path, set_config(vocab_size=256))))
    assert "tokenizer has 720 tokens but the embedding only 256 rows" in line


def test_a_sequence_length_beyond_the_positions(capsys, tmp_path, tiny):
    line = refused(capsys, tmp_path, str(tiny), "model.max_seq_len=100000")
    assert "max_position_embeddings (512)" in line


def test_an_unknown_tiny_family(capsys, tmp_path):
    assert "unknown tiny family" in refused(capsys, tmp_path, "tiny:gpt")


def test_a_hub_id_that_cannot_be_downloaded(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "could not be downloaded" in refused(capsys, tmp_path, "nobody-here/no-such-model")


def test_model_titan_with_a_pretrained_model(capsys, tmp_path, tiny):
    line = refused(capsys, tmp_path, str(tiny), "model.titan.dim=256")
    assert "model.titan" in line


def test_tiny_init_std_writes_its_own_folder(tmp_path):
    """`model.tiny_init_std` makes a tiny model of that weight std, in a folder of its own (the
    family-default one beside it is never reused for it), and the weights have that std."""
    from safetensors.torch import load_file

    from rlsvc.models.pretrained import local_folder

    folder = local_folder("tiny:qwen3", str(tmp_path), 0, 0.1)
    assert folder.name == "qwen3-seed0-std0.1"
    assert json.loads((folder / "config.json").read_text())["initializer_range"] == 0.1
    [weights] = folder.glob("*.safetensors")
    std = load_file(str(weights))["model.layers.0.mlp.up_proj.weight"].std().item()
    assert 0.09 < std < 0.11, std
    assert local_folder("tiny:qwen3", str(tmp_path), 0, 0.1) == folder  # written once, then reused
    assert local_folder("tiny:qwen3", str(tmp_path), 0).name == "qwen3-seed0"
