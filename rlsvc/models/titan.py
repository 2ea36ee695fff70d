"""The policy network: a real TorchTitan Llama3 decoder, sized by a small pydantic config.

The model is assembled from TorchTitan 0.3.0's config dataclasses (the same building blocks its
`llama3_configs` flavours use), with two deliberate departures from the stock flavours:

- `fuse_qkv=False`: separate wq/wk/wv keep `get_model_state_dict` working under FSDP2 and map
  one-to-one onto Hugging Face's q_proj/k_proj/v_proj.
- inner attention = `MaskableSDPA` (rlsvc/models/attention.py): TorchTitan's causal
  `ScaledDotProductAttention`, which also takes a dense mask for the trainer's shared-prefix
  packing (rlsvc/models/packing.py); FlexAttention has no CPU backward and varlen needs flash
  kernels. Unpacked sequences must be RIGHT-padded: pads after the last real token cannot
  influence earlier positions under a causal mask.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from rlsvc.config import TitanModelConfig

if TYPE_CHECKING:
    import torch
    from torch import nn

# torch and torchtitan are imported inside the functions: configs import `ModelConfig`, and
# parsing a config (or `--help`) must not pay for torch.

# The shape config lives in rlsvc.config (torch-free, validated with the rest of the run config).
ModelConfig = TitanModelConfig


def pick_device(device: str = "auto") -> torch.device:
    """`auto` means CUDA when present, else CPU; nothing here requires a GPU."""
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def compute_dtype(name: str, device: torch.device) -> torch.dtype:
    """`auto`: bfloat16 on CUDA (what the GPU kernels and TorchTitan's recipes use), float32 on
    CPU (exact agreement with the vLLM-cpu engine's float32 logprobs)."""
    import torch

    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, name)


def autocast(device: torch.device, dtype: torch.dtype):
    """Mixed precision for an unsharded model (FSDP casts its parameters itself)."""
    import contextlib

    import torch

    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def _inits(cfg: ModelConfig) -> dict[str, dict]:
    """TorchTitan's Llama3 init recipe (torchtitan/models/llama3/__init__.py), per parameter role,
    with the embedding std taken from the config (see `init_embedding_std`)."""
    from torch import nn
    from torchtitan.models.common.param_init import depth_scaled_std

    s = cfg.dim**-0.5
    return {
        "linear": {"weight": partial(nn.init.trunc_normal_, std=0.02)},
        "norm": {"weight": nn.init.ones_},
        "embedding": {"weight": partial(nn.init.normal_, std=cfg.init_embedding_std)},
        "output": {"weight": partial(nn.init.trunc_normal_, std=s, a=-3 * s, b=3 * s)},
        **{f"depth{i}": {"weight": partial(nn.init.trunc_normal_, std=depth_scaled_std(0.02, i))} for i in range(cfg.n_layers)},
    }


def _layer_config(cfg: ModelConfig, layer_id: int, inits: dict[str, dict]):
    from torchtitan.models.common import ComplexRoPE, RMSNorm
    from torchtitan.models.common.config_utils import make_ffn_config, make_gqa_config
    from torchtitan.models.llama3 import Llama3TransformerBlock

    from rlsvc.models.attention import MaskableSDPA

    rope = ComplexRoPE.Config(dim=cfg.head_dim, max_seq_len=cfg.max_seq_len, theta=cfg.rope_theta)
    return Llama3TransformerBlock.Config(
        attention_norm=RMSNorm.Config(normalized_shape=cfg.dim, eps=cfg.norm_eps, param_init=inits["norm"]),
        ffn_norm=RMSNorm.Config(normalized_shape=cfg.dim, eps=cfg.norm_eps, param_init=inits["norm"]),
        attention=make_gqa_config(
            dim=cfg.dim,
            n_heads=cfg.n_heads,
            n_kv_heads=cfg.n_kv_heads,
            wqkv_param_init=inits["linear"],
            wo_param_init=inits[f"depth{layer_id}"],
            inner_attention=MaskableSDPA.Config(),
            fuse_qkv=False,
            rope=rope,
        ),
        feed_forward=make_ffn_config(
            dim=cfg.dim,
            hidden_dim=cfg.ffn_hidden_dim,
            w1_param_init=inits["linear"],
            w2w3_param_init=inits[f"depth{layer_id}"],
        ),
    )


def titan_config(cfg: ModelConfig):
    """The TorchTitan `Llama3Model.Config` for `cfg` (no weight tying, SDPA, unfused QKV)."""
    from torchtitan.models.common import Embedding, Linear, RMSNorm
    from torchtitan.models.llama3 import Llama3Model

    inits = _inits(cfg)
    return Llama3Model.Config(
        dim=cfg.dim,
        vocab_size=cfg.vocab_size,
        tok_embeddings=Embedding.Config(num_embeddings=cfg.vocab_size, embedding_dim=cfg.dim, param_init=inits["embedding"]),
        norm=RMSNorm.Config(normalized_shape=cfg.dim, eps=cfg.norm_eps, param_init=inits["norm"]),
        lm_head=Linear.Config(in_features=cfg.dim, out_features=cfg.vocab_size, param_init=inits["output"]),
        layers=[_layer_config(cfg, i, inits) for i in range(cfg.n_layers)],
    )


def build_model(cfg: ModelConfig, seed: int = 0, device: str | torch.device = "cpu") -> nn.Module:
    """Build the TorchTitan Llama3 model in float32 with weights drawn deterministically from `seed`.

    Built on the meta device and materialised on CPU, so the weights are bit-identical whatever
    `device` is (and whatever the process's global RNG state was); then moved to `device`.
    """
    import torch

    with torch.device("meta"):
        model = titan_config(cfg).build()
    model.to_empty(device="cpu")
    # fork_rng: TorchTitan's initialisers draw from the global generator; keep the caller's stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with torch.no_grad():
            model.init_states(buffer_device=torch.device("cpu"))
    return model.to(device=torch.device(device))


def forward(model: nn.Module, input_ids: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Logits [N, T, V] for right-padded token ids [N, T] (positions default to 0..T-1). With
    the rows' `lengths`, rows sharing a prefix are packed (rlsvc/models/packing.py) where that
    saves work: the logits at a row's last token and at its padding are then not computed (those
    positions hold another position's logits; nothing reads them)."""
    from rlsvc.models.packing import plan, unpack

    packed = plan(input_ids, lengths) if lengths is not None else None
    if packed is None:
        return model(input_ids)
    return unpack(model(packed.ids, positions=packed.positions, attention_masks=packed.mask), packed)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
