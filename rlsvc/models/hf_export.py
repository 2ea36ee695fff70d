"""TorchTitan <-> Hugging Face `LlamaForCausalLM` weights, and atomic HF checkpoint folders.

Names and the RoPE layout both differ: TorchTitan's Llama3 applies complex RoPE to interleaved
pairs (d0,d1),(d2,d3),..., HF's `rotate_half` pairs d_i with d_{i+head_dim/2}. TorchTitan's own
`Llama3StateDictAdapter` (the permutation from HF's conversion script) handles both; the unit
tests check the exported model's logits against `transformers` numerically.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from rlsvc.models.titan import ModelConfig, titan_config
from rlsvc.models.tokenizer import BOS_ID, EOS_ID, PAD_ID, save_tokenizer

WEIGHTS_FILE = "model.safetensors"


def _adapter(cfg: ModelConfig):
    from torchtitan.models.llama3 import Llama3StateDictAdapter

    return Llama3StateDictAdapter(titan_config(cfg), hf_assets_path=None)


def _permuted_view(w: torch.Tensor, n_heads: int, dim1: int | None = None, dim2: int | None = None) -> torch.Tensor:
    """TorchTitan's q/k RoPE permutation as a 4-D view (no copy); `hf_shape` gives its HF shape.
    The adapter's own version reshapes and clones (two copies of every q/k weight)."""
    dim1 = w.shape[0] if dim1 is None else dim1
    dim2 = w.shape[1] if dim2 is None else dim2
    return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2)


def hf_shape(t: torch.Tensor) -> tuple[int, ...]:
    """The HF shape of a tensor from `to_hf_state_dict(..., lazy_permute=True)`."""
    if t.dim() == 4:
        return (t.shape[0] * t.shape[1] * t.shape[2], t.shape[3])
    return tuple(t.shape)


def to_hf_state_dict(
    titan_sd: dict[str, torch.Tensor], cfg: ModelConfig, copy: bool = True, lazy_permute: bool = False
) -> dict[str, torch.Tensor]:
    """TorchTitan names/layout -> HF Llama names/layout, as contiguous CPU float32 COPIES.

    Copies: unpermuted tensors would otherwise alias the live parameters, and a snapshot sent to
    vLLM or the reference model must not change when the optimiser steps. `copy=False` is for
    callers that copy anyway (a weight-sync transport packing its own buffer): tensors that need
    no permutation are then the live parameters themselves, detached. `lazy_permute=True` (with
    copy=False) leaves permuted q/k weights as 4-D views of the parameters (see `hf_shape`), for
    a transport that writes them to their destination in one strided copy.
    """
    return adapter_to_hf(_adapter(cfg), titan_sd, copy, lazy_permute)


def adapter_to_hf(adapter: Any, titan_sd: dict[str, torch.Tensor], copy: bool, lazy_permute: bool) -> dict[str, torch.Tensor]:
    """`adapter.to_hf` with `to_hf_state_dict`'s copy and lazy-permute semantics, for any
    TorchTitan state-dict adapter (a fresh one: `lazy_permute` patches it). Only adapters that
    permute q/k (Llama's) have anything to leave lazy."""
    if lazy_permute and hasattr(adapter, "_permute"):
        adapter._permute = _permuted_view
    hf_sd = adapter.to_hf(dict(titan_sd))
    if not copy:
        return {k: v.detach() if v.dim() == 4 else v.detach().contiguous() for k, v in hf_sd.items()}
    return {k: v.detach().to("cpu", torch.float32, copy=True).contiguous() for k, v in hf_sd.items()}


def from_hf_state_dict(hf_sd: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """HF Llama names/layout -> TorchTitan names/layout (inverse of `to_hf_state_dict`).

    A checkpoint with tied embeddings (no `lm_head.weight`) is untied by copying the embedding,
    since our TorchTitan config keeps a separate output head. Checkpoints with parameters the
    Llama3 layout lacks (e.g. Qwen2's q/k/v biases) are rejected by name.
    """
    hf_sd = {k: v for k, v in hf_sd.items() if not k.endswith("rotary_emb.inv_freq")}
    if "lm_head.weight" not in hf_sd and "model.embed_tokens.weight" in hf_sd:
        hf_sd["lm_head.weight"] = hf_sd["model.embed_tokens.weight"].clone()
    try:
        titan_sd = _adapter(cfg).from_hf(hf_sd)
    except KeyError as err:
        raise ValueError(f"HF weight {err} has no TorchTitan Llama3 counterpart (not a Llama layout?)") from err
    return {k: v.contiguous() for k, v in titan_sd.items()}


def hf_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every weight of the equivalent `LlamaForCausalLM` (what `to_hf_state_dict`
    gives for this config), from the config alone: no model is built."""
    d, hd, f = cfg.dim, cfg.head_dim, cfg.ffn_hidden_dim
    layer = {
        "input_layernorm.weight": (d,),
        "self_attn.q_proj.weight": (cfg.n_heads * hd, d),
        "self_attn.k_proj.weight": (cfg.n_kv_heads * hd, d),
        "self_attn.v_proj.weight": (cfg.n_kv_heads * hd, d),
        "self_attn.o_proj.weight": (d, cfg.n_heads * hd),
        "post_attention_layernorm.weight": (d,),
        "mlp.gate_proj.weight": (f, d),
        "mlp.up_proj.weight": (f, d),
        "mlp.down_proj.weight": (d, f),
    }
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, d), "model.norm.weight": (d,), "lm_head.weight": (cfg.vocab_size, d)}
    for i in range(cfg.n_layers):
        shapes.update({f"model.layers.{i}.{name}": shape for name, shape in layer.items()})
    return shapes


def hf_config_dict(cfg: ModelConfig) -> dict:
    """The `config.json` of the equivalent `LlamaForCausalLM`."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn_hidden_dim,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.max_seq_len,
        "rope_theta": cfg.rope_theta,
        "rms_norm_eps": cfg.norm_eps,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "torch_dtype": "float32",
    }


def _generation_config() -> dict:
    return {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}


def _write_checkpoint(directory: Path, hf_sd: dict[str, torch.Tensor], cfg: ModelConfig, extra_files: dict[str, str]) -> None:
    from safetensors.torch import save_file

    for name, text in extra_files.items():
        (directory / name).write_text(text)
    (directory / "config.json").write_text(json.dumps(hf_config_dict(cfg), indent=2))
    (directory / "generation_config.json").write_text(json.dumps(_generation_config(), indent=2))
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in hf_sd.items()}
    save_file(tensors, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})
    save_tokenizer(directory, cfg.tokenizer)


def save_hf_checkpoint(
    directory: str | Path, hf_state_dict: dict[str, torch.Tensor], cfg: ModelConfig, extra_files: dict[str, str] | None = None
) -> Path:
    """Write a loadable HF folder (config, weights, generation config, tokenizer) atomically.

    Everything goes into a temporary sibling first and is renamed into place at the end, so a
    reader (vLLM, a crash-restart) sees either no folder or a complete one. An existing folder at
    `directory` is replaced. `extra_files` (name -> text) are written inside the same transaction.
    """
    from rlsvc.checkpoint import write_folder_atomically

    return write_folder_atomically(Path(directory), lambda tmp: _write_checkpoint(tmp, hf_state_dict, cfg, extra_files or {}))


def load_hf_state_dict(directory: str | Path) -> dict[str, torch.Tensor]:
    """All tensors from the folder's safetensors file(s), keyed by HF name."""
    from safetensors.torch import load_file

    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {directory}")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    return state
