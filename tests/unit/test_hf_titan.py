"""Hugging Face checkpoints of each supported family become TorchTitan models with the
checkpoint's exact dimensions (rlsvc/models/hf_titan.py): logits equal transformers', and
to_hf(from_hf(weights)) gives back the checkpoint exactly. Bad folders are one-line errors."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import TINY_HF_SHAPE, tiny_hf_checkpoint

from rlsvc.models.hf_titan import HFModelError, build_hf_model, read_hf_config


@pytest.mark.parametrize("family, titan_class", [("qwen3", "Qwen3Model"), ("llama", "Llama3Model"), ("qwen2", "Qwen3Model")])
def test_each_family_loads_with_transformers_logits_and_round_trips(family, titan_class, tmp_path):
    reference = tiny_hf_checkpoint(family, tmp_path)
    model, adapter, hf = build_hf_model(tmp_path, max_seq_len=64)
    assert type(model).__name__ == titan_class and hf["model_type"] == family
    ids = torch.randint(0, TINY_HF_SHAPE["vocab_size"], (3, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(model(ids), reference(ids).logits, atol=1e-4, rtol=0)
    if family == "qwen2":  # the biases are really used
        assert any(k.endswith("wq.bias") for k in model.state_dict())
    checkpoint = reference.state_dict()
    tied = reference.config.tie_word_embeddings
    back = adapter.to_hf(model.state_dict())
    assert set(back) == {k for k in checkpoint if not (tied and k == "lm_head.weight")}
    assert all(torch.equal(back[k], checkpoint[k]) for k in back)
    assert model.lm_head.weight is model.tok_embeddings.weight if tied else model.lm_head.weight is not model.tok_embeddings.weight


def test_bad_folders_are_one_line_errors(tmp_path):
    with pytest.raises(HFModelError, match="model.path: no such folder"):
        read_hf_config(tmp_path / "missing")
    with pytest.raises(HFModelError, match="has no config.json"):
        read_hf_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(HFModelError, match=r"model_type 'gpt2' is not supported \(supported: qwen3, llama, qwen2\)"):
        read_hf_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": 8}))
    with pytest.raises(HFModelError, match="config.json lacks num_hidden_layers"):
        read_hf_config(tmp_path)
