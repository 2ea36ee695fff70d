"""Pretrained Hugging Face checkpoints as TorchTitan models.

`config.json` decides the model: `model_type` picks the TorchTitan family and the checkpoint's
own dimensions build it (named flavours rarely match a real checkpoint's shapes):

- `qwen3` -> `torchtitan.models.qwen3.Qwen3Model` (q/k RMSNorm, cos/sin RoPE), with TorchTitan's
  `Qwen3StateDictAdapter`;
- `llama` -> `torchtitan.models.llama3.Llama3Model` (complex RoPE; the adapter permutes q/k between
  Hugging Face's rotate-half layout and TorchTitan's interleaved one), with `Llama3StateDictAdapter`;
- `qwen2` (Qwen2 and Qwen2.5) -> the Qwen3 decoder built from TorchTitan's own components without
  q/k norm and with q/k/v bias, and `Qwen2StateDictAdapter` below.

Deliberate choices, as in `rlsvc/models/titan.py`: unfused q/k/v (one-to-one with q_proj/k_proj/
v_proj, and `get_model_state_dict` works under FSDP2) and `MaskableSDPA` (causal SDPA, or the
trainer's shared-prefix packing mask; FlexAttention has no CPU backward; sequences are right-padded). Embeddings are tied where the
config ties them. Importing this module costs nothing: torch and TorchTitan load inside functions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SUPPORTED = {"qwen3": "Qwen3 (dense)", "llama": "Llama 3", "qwen2": "Qwen2 / Qwen2.5"}
"""Hugging Face `model_type` -> what it is; the message for anything else lists these."""


class HFModelError(ValueError):
    """A checkpoint folder that cannot be trained here, phrased as one line."""


def read_hf_config(folder: str | Path) -> dict[str, Any]:
    """The folder's `config.json`, checked: a supported dense `model_type` with the fields a
    decoder needs."""
    path = Path(folder) / "config.json"
    if not Path(folder).is_dir():
        raise HFModelError(f"model.path: no such folder: {folder}")
    if not path.is_file():
        raise HFModelError(f"model.path: {folder} has no config.json (not a Hugging Face model folder)")
    hf = json.loads(path.read_text())
    kind = hf.get("model_type")
    if kind not in SUPPORTED:
        raise HFModelError(f"model.path: model_type {kind!r} is not supported (supported: {', '.join(SUPPORTED)})")
    if hf.get("num_experts") or hf.get("num_local_experts"):
        raise HFModelError(f"model.path: {kind} with experts (MoE) is not supported; dense models only")
    missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size") if k not in hf]
    if missing:
        raise HFModelError(f"model.path: config.json lacks {', '.join(missing)}")
    return hf


def rope_theta(hf: dict[str, Any]) -> float:
    """transformers 5 keeps it under `rope_parameters`; older configs at the top level."""
    params = hf.get("rope_parameters") or {}
    return float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))


def rope_scaling(hf: dict[str, Any]) -> dict[str, Any]:
    params = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    return params if params.get("rope_type", params.get("type", "default")) not in ("default", None) else {}


def head_dim(hf: dict[str, Any]) -> int:
    return int(hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"])


def titan_config(hf: dict[str, Any], max_seq_len: int) -> Any:
    """The TorchTitan model config with the checkpoint's exact dimensions."""
    from torchtitan.models.common import ComplexRoPE, CosSinRoPE, Embedding, Linear
    from torchtitan.models.common.config_utils import make_ffn_config, make_gqa_config
    from torchtitan.models.common.nn_modules import RMSNorm
    from torchtitan.models.llama3 import Llama3Model, Llama3TransformerBlock
    from torchtitan.models.qwen3 import Qwen3Model
    from torchtitan.models.qwen3.model import Qwen3TransformerBlock

    from rlsvc.models.attention import MaskableSDPA

    kind, dim, hd = hf["model_type"], int(hf["hidden_size"]), head_dim(hf)
    eps = float(hf.get("rms_norm_eps", 1e-6))
    vocab, n_heads = int(hf["vocab_size"]), int(hf["num_attention_heads"])
    n_kv = int(hf.get("num_key_value_heads") or n_heads)
    init = _inits()

    def norm(size: int) -> Any:
        return RMSNorm.Config(normalized_shape=size, eps=eps, param_init=init["norm"])

    if kind == "llama":
        scaling = rope_scaling(hf)
        rope: Any = ComplexRoPE.Config(dim=hd, max_seq_len=max_seq_len, theta=rope_theta(hf), **_llama_scaling(scaling))
        block, model_cls = Llama3TransformerBlock, Llama3Model
    else:
        if rope_scaling(hf):
            raise HFModelError(f"model.path: {kind} with rope scaling {rope_scaling(hf)} is not supported")
        rope = CosSinRoPE.Config(dim=hd, max_seq_len=max_seq_len, theta=rope_theta(hf))
        block, model_cls = Qwen3TransformerBlock, Qwen3Model
    layers = []
    for _ in range(int(hf["num_hidden_layers"])):
        attention = make_gqa_config(
            dim=dim,
            n_heads=n_heads,
            n_kv_heads=n_kv,
            head_dim=hd,
            wqkv_param_init=init["linear"],
            wo_param_init=init["linear"],
            inner_attention=MaskableSDPA.Config(),
            fuse_qkv=False,
            rope=rope,
            qk_norm=norm(hd) if kind == "qwen3" else None,
        )
        if kind == "qwen2":  # q/k/v carry a bias in Qwen2 (not o_proj)
            attention.qkv_linear.wq.bias = True
            attention.qkv_linear.wkv.bias = True
        ffn = make_ffn_config(
            dim=dim, hidden_dim=int(hf["intermediate_size"]), w1_param_init=init["linear"], w2w3_param_init=init["linear"]
        )
        layers.append(block.Config(attention_norm=norm(dim), ffn_norm=norm(dim), attention=attention, feed_forward=ffn))
    return model_cls.Config(
        dim=dim,
        vocab_size=vocab,
        enable_weight_tying=bool(hf.get("tie_word_embeddings", False)),
        tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim, param_init=init["embedding"]),
        norm=norm(dim),
        lm_head=Linear.Config(in_features=dim, out_features=vocab, param_init=init["linear"]),
        layers=layers,
    )


def _llama_scaling(scaling: dict[str, Any]) -> dict[str, Any]:
    """Llama 3.1's rope scaling, in TorchTitan's RoPE fields."""
    if not scaling:
        return {}
    if scaling.get("rope_type", scaling.get("type")) != "llama3":
        raise HFModelError(f"model.path: llama rope scaling {scaling} is not supported")
    return {
        "scaling": "llama",
        "scaling_factor": float(scaling["factor"]),
        "low_freq_factor": float(scaling["low_freq_factor"]),
        "high_freq_factor": float(scaling["high_freq_factor"]),
        "original_max_position_embeddings": int(scaling["original_max_position_embeddings"]),
    }


def _inits() -> dict[str, dict]:
    """Initialisers run before the checkpoint's weights replace them (TorchTitan's own)."""
    from functools import partial

    from torch import nn

    return {
        "linear": {"weight": partial(nn.init.normal_, std=0.02), "bias": nn.init.zeros_},
        "norm": {"weight": nn.init.ones_},
        "embedding": {"weight": partial(nn.init.normal_, std=0.02)},
    }


def state_dict_adapter(hf: dict[str, Any], model_config: Any) -> Any:
    """TorchTitan's adapter for the family (`from_hf` / `to_hf`), ours for Qwen2."""
    from torchtitan.models.llama3.state_dict_adapter import Llama3StateDictAdapter
    from torchtitan.models.qwen3.state_dict_adapter import Qwen3StateDictAdapter

    if hf["model_type"] == "llama":
        return Llama3StateDictAdapter(model_config, None)
    if hf["model_type"] == "qwen3":
        return Qwen3StateDictAdapter(model_config, None)
    return _qwen2_adapter_class()(model_config, None)


def _qwen2_adapter_class() -> type:
    from torchtitan.models.qwen3.state_dict_adapter import Qwen3StateDictAdapter

    class Qwen2StateDictAdapter(Qwen3StateDictAdapter):
        """Qwen3's names, plus Qwen2's q/k/v biases, minus Qwen3's q/k norms."""

        def __init__(self, model_config: Any, hf_assets_path: str | None) -> None:
            super().__init__(model_config, hf_assets_path)
            for hf_key in ("model.layers.{}.self_attn.q_norm.weight", "model.layers.{}.self_attn.k_norm.weight"):
                self.from_hf_map.pop(hf_key)
            for p in ("q", "k", "v"):
                self.from_hf_map[f"model.layers.{{}}.self_attn.{p}_proj.bias"] = f"layers.{{}}.attention.qkv_linear.w{p}.bias"

    return Qwen2StateDictAdapter


def load_hf_weights(folder: str | Path) -> dict[str, Any]:
    """Every tensor of the folder's safetensors files, by Hugging Face name (on CPU)."""
    from safetensors.torch import load_file

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise HFModelError(f"model.path: {folder} has no *.safetensors weights")
    weights: dict[str, Any] = {}
    for f in files:
        weights.update(load_file(str(f)))
    return weights


def build_hf_model(folder: str | Path, max_seq_len: int, device: str = "cpu") -> tuple[Any, Any, dict[str, Any]]:
    """(TorchTitan model with the checkpoint's weights, its state-dict adapter, config.json):
    built on the meta device, materialised, then loaded through the adapter."""
    import torch

    hf = read_hf_config(folder)
    cfg = titan_config(hf, max_seq_len)
    with torch.device("meta"):
        model = cfg.build()
    model.to_empty(device="cpu")
    with torch.no_grad():
        model.init_states(buffer_device=torch.device("cpu"))  # RoPE caches; the weights are replaced next
    adapter = state_dict_adapter(hf, cfg)
    state = adapter.from_hf(load_hf_weights(folder))
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (cfg.enable_weight_tying and k == "lm_head.weight")]
    if missing or unexpected:
        raise HFModelError(
            f"model.path: weights do not match the {hf['model_type']} model: missing {missing[:3]}, unexpected {unexpected[:3]}"
        )
    return model.to(torch.device(device)), adapter, hf


def load_hf_checkpoint(model: Any, adapter: Any, folder: str | Path) -> None:
    """Read the folder's safetensors into `model` through `adapter`, as TorchTitan's own HF
    load does: under FSDP2 the state dict holds DTensors and DCP's `HuggingFaceStorageReader`
    reads, on each rank, only the parts of each tensor that rank holds (no full copy per rank)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict

    hf_state = adapter.to_hf(get_model_state_dict(model))
    dcp.load(hf_state, storage_reader=adapter.get_hf_storage_reader(str(folder)))
    set_model_state_dict(model, adapter.from_hf(hf_state), options=StateDictOptions(strict=True))
