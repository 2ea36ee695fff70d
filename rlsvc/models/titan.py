"""The policy network: a real TorchTitan Llama3 decoder, sized by a small pydantic config.

The model is assembled from TorchTitan 0.3.0's config dataclasses (the same building blocks its
`llama3_configs` flavours use), with two deliberate departures from the stock flavours:

- `fuse_qkv=False`: separate wq/wk/wv keep `get_model_state_dict` working under FSDP2 and map
  one-to-one onto Hugging Face's q_proj/k_proj/v_proj.
- inner attention = `ScaledDotProductAttention` (causal): FlexAttention has no CPU backward and
  varlen needs flash kernels, and our sequences are short and unpacked, so a plain causal mask is
  all we need. Sequences must therefore be RIGHT-padded: pads after the last real token cannot
  influence earlier positions under a causal mask.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlsvc.models.tokenizer import VOCAB

if TYPE_CHECKING:
    import torch
    from torch import nn

# torch and torchtitan are imported inside the functions: configs import `ModelConfig`, and
# parsing a config (or `--help`) must not pay for torch.

# vLLM's CPU attention kernels reject smaller heads (measured, see DESIGN.md).
MIN_HEAD_DIM = 32


class ModelConfig(BaseModel):
    """Shape of the Llama3-style policy. Defaults give a ~0.4M-parameter model for CPU runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arch: Literal["llama3"] = "llama3"
    """Model family; only TorchTitan's Llama3 decoder is wired up."""
    dim: int = Field(128, gt=0)
    """Hidden size (HF `hidden_size`)."""
    n_layers: int = Field(2, gt=0)
    """Number of transformer blocks."""
    n_heads: int = Field(4, gt=0)
    """Query heads; `dim / n_heads` is the head size, which must be >= 32 for vLLM on CPU."""
    n_kv_heads: int = Field(2, gt=0)
    """Key/value heads (grouped-query attention); must divide `n_heads`."""
    vocab_size: int = Field(64, gt=0)
    """Embedding rows; >= the tokenizer's vocabulary, padded up so matmuls stay aligned."""
    ffn_hidden_dim: int = Field(384, gt=0)
    """SwiGLU hidden size (HF `intermediate_size`); 384 = Llama's 8/3*dim rounded up to 64."""
    max_seq_len: int = Field(32, gt=0)
    """Longest sequence (prompt + response) the RoPE cache covers."""
    rope_theta: float = Field(10000.0, gt=0)
    """RoPE base frequency."""
    norm_eps: float = Field(1e-5, gt=0)
    """RMSNorm epsilon."""

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelConfig:
        if self.dim % self.n_heads != 0:
            raise ValueError(f"n_heads: dim ({self.dim}) must be divisible by n_heads ({self.n_heads})")
        if self.head_dim < MIN_HEAD_DIM:
            raise ValueError(
                f"n_heads: head_dim = dim / n_heads = {self.head_dim} must be >= {MIN_HEAD_DIM} "
                "(vLLM CPU attention kernels); lower n_heads or raise dim"
            )
        if self.head_dim % 2 != 0:
            raise ValueError(f"n_heads: head_dim ({self.head_dim}) must be even for RoPE")
        if self.n_heads % self.n_kv_heads != 0:
            raise ValueError(f"n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads})")
        if self.vocab_size < len(VOCAB):
            raise ValueError(f"vocab_size ({self.vocab_size}) must be >= the tokenizer's {len(VOCAB)} tokens")
        return self


def pick_device(device: str = "auto") -> torch.device:
    """`auto` means CUDA when present, else CPU; nothing here requires a GPU."""
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _inits(cfg: ModelConfig) -> dict[str, dict]:
    """TorchTitan's Llama3 init recipe (torchtitan/models/llama3/__init__.py), per parameter role."""
    from torch import nn
    from torchtitan.models.common.param_init import depth_scaled_std

    s = cfg.dim**-0.5
    return {
        "linear": {"weight": partial(nn.init.trunc_normal_, std=0.02)},
        "norm": {"weight": nn.init.ones_},
        "embedding": {"weight": partial(nn.init.normal_, std=1.0)},
        "output": {"weight": partial(nn.init.trunc_normal_, std=s, a=-3 * s, b=3 * s)},
        **{f"depth{i}": {"weight": partial(nn.init.trunc_normal_, std=depth_scaled_std(0.02, i))} for i in range(cfg.n_layers)},
    }


def _layer_config(cfg: ModelConfig, layer_id: int, inits: dict[str, dict]):
    from torchtitan.models.common import ComplexRoPE, RMSNorm
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.common.config_utils import make_ffn_config, make_gqa_config
    from torchtitan.models.llama3 import Llama3TransformerBlock

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
            inner_attention=ScaledDotProductAttention.Config(),
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


def forward(model: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """Logits [N, T, V] for right-padded token ids [N, T] (positions default to 0..T-1)."""
    return model(input_ids)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
