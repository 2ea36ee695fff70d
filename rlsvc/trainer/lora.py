"""LoRA adapters on the TorchTitan policy (`model.lora`, docs/lora.md).

Each target projection (an `nn.Linear` of a decoder layer: TorchTitan's wq/wk/wv/wo/w1/w2/w3) gets
two children, `lora_a` [r, in] and `lora_b` [out, r], and a forward hook that adds
`scale * lora_b(lora_a(dropout(x)))` to its output. Why not a library's module:

- TorchTitan 0.3's `LoRAConverter` rewrites the model config before the build; the pretrained
  path loads the checkpoint through the family's state-dict adapter with strict keys, and the
  converter has no dropout and no switch to turn the adapters off (the reference needs one).
- PEFT's injection wraps every target (`wq.base_layer.weight`), renaming the weights that the
  state-dict adapters, weight sync and checkpoints all key on.

The names here are TorchTitan's own LoRALinear's (`...attention.wq.lora_a.weight`), the inits
are PEFT's and TorchTitan's (A: kaiming-uniform with a=sqrt(5), B: zeros, so a new adapter
changes nothing), and the base weights keep their names: the base model's state dict, its
Hugging Face conversion and FSDP2's sharding see only added parameters. PEFT itself writes the
output format (`peft_adapter_state_dict`, `save_peft_adapter`): the folder that
`peft.PeftModel.from_pretrained` loads on the base Hugging Face folder.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

    from rlsvc.config import LoraConfig
    from rlsvc.models.spec import ModelSpec

TITAN_NAMES = {"q_proj": "wq", "k_proj": "wk", "v_proj": "wv", "o_proj": "wo", "gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}
"""Hugging Face projection name -> the TorchTitan module that computes it."""
HF_NAMES = {titan: hf for hf, titan in TITAN_NAMES.items()}
LORA_KEYS = (".lora_a.", ".lora_b.")


@dataclass(frozen=True)
class LoraSettings:
    """The `model.lora` section as the trainer uses it (a frozen dataclass: it travels by pickle)."""

    rank: int
    alpha: float
    dropout: float = 0.0
    targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    """Hugging Face projection names."""

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank

    @classmethod
    def from_config(cls, cfg: LoraConfig) -> LoraSettings | None:
        """None where LoRA is off."""
        if not cfg.enabled:
            return None
        return cls(cfg.rank, cfg.alpha, cfg.dropout, tuple(cfg.target_modules))


class _Switch:
    """Whether the model's adapters add their term (off: the base model, the reference)."""

    enabled = True


def is_lora_key(name: str) -> bool:
    return any(k in name for k in LORA_KEYS)


def target_modules(model: nn.Module, settings: LoraSettings) -> list[tuple[str, nn.Linear]]:
    """(name, module) of every projection `settings` targets, in the model's order."""
    from torch import nn

    wanted = {TITAN_NAMES[t] for t in settings.targets}
    return [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear) and n.rsplit(".", 1)[-1] in wanted]


def add_adapters(model: nn.Module, settings: LoraSettings, seed: int) -> nn.Module:
    """Freeze `model` and give each target projection its adapter, drawn from `seed` (the same on
    every rank and every device). Call before FSDP2 shards the model."""
    import torch
    from torch import nn

    model.requires_grad_(False)
    switch = _Switch()
    model._lora_switch = switch  # type: ignore[assignment]
    gen = torch.Generator().manual_seed(seed + 7919)  # apart from the base weights' stream
    targets = target_modules(model, settings)
    if not targets:
        raise ValueError(f"model.lora.target_modules: {', '.join(settings.targets)} match no module of the model")
    for _, linear in targets:
        a = nn.Linear(linear.in_features, settings.rank, bias=False)
        b = nn.Linear(settings.rank, linear.out_features, bias=False)
        with torch.no_grad():
            bound = 1 / math.sqrt(linear.in_features)  # kaiming_uniform_(a=sqrt(5)), PEFT's default
            a.weight.copy_(torch.empty_like(a.weight).uniform_(-bound, bound, generator=gen))
            b.weight.zero_()
        device = linear.weight.device
        linear.add_module("lora_a", a.to(device))
        linear.add_module("lora_b", b.to(device))
        linear.register_forward_hook(_adapter_hook(switch, settings))
    return model


def _adapter_hook(switch: _Switch, settings: LoraSettings) -> Any:
    import torch.nn.functional as F

    scale, p = settings.scaling, settings.dropout

    def hook(module: Any, args: tuple[torch.Tensor, ...], output: torch.Tensor) -> torch.Tensor:
        if not switch.enabled:
            return output
        x = F.dropout(args[0], p, module.training) if p > 0 else args[0]
        return output + scale * module.lora_b(module.lora_a(x))

    return hook


@contextmanager
def adapters_disabled(model: nn.Module) -> Iterator[None]:
    """The base model for the duration: the reference's logprobs without a second copy."""
    switch: _Switch = model._lora_switch  # type: ignore[assignment]
    switch.enabled = False
    try:
        yield
    finally:
        switch.enabled = True


def adapter_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """The adapters' parameters by name (under FSDP2: this rank's shards, as DTensors)."""
    return {n: p for n, p in model.named_parameters() if is_lora_key(n)}


def snapshot_adapters(model: nn.Module) -> dict[str, torch.Tensor]:
    """Detached copies of the adapters as they are now, in the parameters' own layout (under
    FSDP2 each rank copies its shards: no collective). `adapters_set_to` puts them back."""
    return {n: p.detach().clone() for n, p in adapter_parameters(model).items()}


@contextmanager
def adapters_set_to(model: nn.Module, values: dict[str, torch.Tensor]) -> Iterator[None]:
    """The model with its adapters holding `values` (a `snapshot_adapters`) for the duration,
    its own put back bit for bit after: the reference's logprobs from a frozen adapter set with
    no second model. Copies in place, so FSDP2 gathers the swapped shards on the next forward."""
    import torch

    params = adapter_parameters(model)
    with torch.no_grad():
        own = {n: params[n].detach().clone() for n in values}
        for n, v in values.items():
            params[n].copy_(v)
    try:
        yield
    finally:
        with torch.no_grad():
            for n, v in own.items():
                params[n].copy_(v)


def split(titan_sd: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(base weights, adapter weights) of a TorchTitan-named state dict."""
    base = {k: v for k, v in titan_sd.items() if not is_lora_key(k)}
    return base, {k: v for k, v in titan_sd.items() if is_lora_key(k)}


def merged(titan_sd: dict[str, torch.Tensor], settings: LoraSettings) -> dict[str, torch.Tensor]:
    """The base weights with each adapter folded in (W + scale * B @ A), TorchTitan names: what
    the trained policy computes, as one plain model."""
    base, adapters = split(titan_sd)
    out = dict(base)
    for key in adapters:
        if key.endswith(".lora_a.weight"):
            stem = key.removesuffix(".lora_a.weight")
            a, b = adapters[key], adapters[f"{stem}.lora_b.weight"]
            w = base[f"{stem}.weight"]
            out[f"{stem}.weight"] = (w.float() + settings.scaling * (b.float() @ a.float())).to(w.dtype)
    return out


def _row_order(spec: ModelSpec, titan_key: str, rows: int, cols: int) -> torch.Tensor:
    """The Hugging Face row order of a TorchTitan weight: Llama permutes q/k rows between the two
    layouts (rope), the others keep them. Found by converting a weight whose rows hold their index."""
    import torch

    probe = torch.arange(rows, dtype=torch.float32)[:, None].expand(rows, cols).contiguous()
    (hf,) = spec.to_hf({titan_key: probe}, copy=True).values()
    return hf[:, 0].round().long()


def peft_adapter_state_dict(spec: ModelSpec, adapter_sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapters in PEFT's tensor names (`base_model.model.model.layers.0.self_attn.q_proj.
    lora_A.weight`), B's rows in the Hugging Face layout (the merged weight's rows are permuted
    alike, so A is unchanged)."""
    out: dict[str, torch.Tensor] = {}
    for key, a in adapter_sd.items():
        if not key.endswith(".lora_a.weight"):
            continue
        stem = key.removesuffix(".lora_a.weight")
        b = adapter_sd[f"{stem}.lora_b.weight"]
        weight_key = f"{stem}.weight"
        order = _row_order(spec, weight_key, b.shape[0], a.shape[1])
        (hf_weight,) = spec.to_hf({weight_key: a.new_zeros(b.shape[0], a.shape[1])}, copy=True)
        hf_stem = "base_model.model." + hf_weight.removesuffix(".weight")
        out[f"{hf_stem}.lora_A.weight"] = a.detach().cpu().contiguous()
        out[f"{hf_stem}.lora_B.weight"] = b.detach().cpu()[order].contiguous()
    return out


def peft_config(settings: LoraSettings, base_model: str) -> dict[str, Any]:
    """adapter_config.json, written by PEFT's own `LoraConfig` (so every PEFT reader accepts it)."""
    from peft import LoraConfig

    cfg = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,  # type: ignore[arg-type]  # typed int; any number scales (alpha / r)
        lora_dropout=settings.dropout,
        target_modules=list(settings.targets),
        bias="none",
        task_type="CAUSAL_LM",
        base_model_name_or_path=base_model,
    )
    return cfg.to_dict()


def peft_config_json(settings: LoraSettings, base_model: str) -> dict[str, Any]:
    """`peft_config` as JSON values (its sets as sorted lists): what adapter_config.json holds,
    and what a weight-sync manifest carries to the engines."""
    config = {k: (sorted(v) if isinstance(v, set) else v) for k, v in peft_config(settings, base_model).items()}
    return json.loads(json.dumps(config, default=str))  # type: ignore[no-any-return]


def save_peft_adapter(folder: str | Path, tensors: dict[str, torch.Tensor], settings: LoraSettings, base_model: str) -> Path:
    """A PEFT adapter folder: adapter_config.json and adapter_model.safetensors, written atomically."""
    return write_peft_folder(folder, tensors, peft_config_json(settings, base_model))


def write_peft_folder(folder: str | Path, tensors: dict[str, torch.Tensor], config: dict[str, Any]) -> Path:
    """`save_peft_adapter` with its adapter_config.json given (`peft_config_json`)."""
    from safetensors.torch import save_file

    from rlsvc.checkpoint import write_folder_atomically

    def write(tmp: Path) -> None:
        (tmp / "adapter_config.json").write_text(json.dumps(config, indent=2))
        save_file(tensors, str(tmp / "adapter_model.safetensors"), metadata={"format": "pt"})

    return write_folder_atomically(Path(folder), write)
