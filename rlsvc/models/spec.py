"""What a policy model is built from, and how its weights cross to Hugging Face form.

Two kinds, one interface (the trainer, the reference model, weight sync and the saved checkpoints
use only this):

- `ScratchModel`: the tiny TorchTitan Llama3 the config describes (`model.titan`), fresh weights
  from the run seed, the built-in word tokenizer (rlsvc/models/titan.py, rlsvc/models/hf_export.py);
- `PretrainedModel`: a Hugging Face folder (`model.source=hf`), built by rlsvc/models/hf_titan.py
  with the checkpoint's own dimensions; its weights go through the family's TorchTitan state-dict
  adapter, and under FSDP2 every rank reads only its own shards of the safetensors.

Both are small frozen dataclasses: they travel to the trainer and reference actors by pickle and
import torch only inside their methods.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

    from rlsvc.config import TitanModelConfig


@dataclass(frozen=True)
class ScratchModel:
    """The config's tiny TorchTitan Llama3, initialised from a seed."""

    cfg: TitanModelConfig

    @property
    def max_seq_len(self) -> int:
        return self.cfg.max_seq_len

    def build(self, seed: int, device: str | torch.device = "cpu", shard: Callable[[nn.Module], nn.Module] | None = None) -> nn.Module:
        """The model with its starting weights, float32, on `device`; `shard` (FSDP2) is applied
        once the weights are there. Every rank draws the same full weights from the seed, then
        keeps its shard: bit-identical to the one-rank model whatever the world size."""
        from rlsvc.models.titan import build_model

        model = build_model(self.cfg, seed, device)
        return shard(model) if shard is not None else model

    def to_hf(self, titan_sd: dict[str, torch.Tensor], copy: bool = True, lazy_permute: bool = False) -> dict[str, torch.Tensor]:
        from rlsvc.models.hf_export import to_hf_state_dict

        return to_hf_state_dict(titan_sd, self.cfg, copy=copy, lazy_permute=lazy_permute)

    def from_hf(self, hf_sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        from rlsvc.models.hf_export import from_hf_state_dict

        return from_hf_state_dict(hf_sd, self.cfg)

    def save(self, folder: Path, hf_sd: dict[str, torch.Tensor], extra_files: dict[str, str] | None = None) -> Path:
        """A complete Hugging Face folder (config, weights, tokenizer), written atomically."""
        from rlsvc.models.hf_export import save_hf_checkpoint

        return save_hf_checkpoint(folder, hf_sd, self.cfg, extra_files)

    def initial_folder(self, workdir: Path) -> Path:
        """What a vLLM engine loads before its first weight sync: the config, the tokenizer, and
        weights of the right names and shapes, all zero. A job syncs the trainer's weights (warm-
        started, or restored on resume) to every engine before any rollout, and an engine started
        again is synced before it serves, so these zeros are never sampled from; the driver builds
        no model for them (it never imports TorchTitan)."""
        import torch

        from rlsvc.models.hf_export import hf_shapes

        return self.save(workdir / "init_hf", {name: torch.zeros(shape) for name, shape in hf_shapes(self.cfg).items()})


@dataclass(frozen=True)
class PretrainedModel:
    """A Hugging Face checkpoint folder (Qwen3, Llama 3, Qwen2/2.5) as a TorchTitan model."""

    path: str
    """The local folder: config.json, *.safetensors, the tokenizer and its chat template."""
    seq_len: int
    """Longest sequence the trainer and vLLM take (`model.max_seq_len`)."""

    @property
    def max_seq_len(self) -> int:
        return self.seq_len

    def hf_config(self) -> dict[str, Any]:
        return self._titan()[0]

    def _titan(self) -> tuple[dict[str, Any], Any]:
        """(config.json, TorchTitan model config), read once per process: every weight sync
        converts names through an adapter built from them."""
        return _titan_config(self.path, self.seq_len)

    def adapter(self) -> Any:
        from rlsvc.models.hf_titan import state_dict_adapter

        return state_dict_adapter(*self._titan())

    def build(self, seed: int, device: str | torch.device = "cpu", shard: Callable[[nn.Module], nn.Module] | None = None) -> nn.Module:
        """The checkpoint's model on `device`: built on the meta device, sharded by `shard`
        (FSDP2) before any memory is allocated, materialised, then loaded from the safetensors
        through the family's adapter, each rank reading only its own shards (DCP's Hugging
        Face reader), so no rank ever holds a full copy."""
        import torch

        from rlsvc.models.hf_titan import load_hf_checkpoint

        _, cfg = self._titan()
        with torch.device("meta"):
            model = cfg.build()
        if shard is not None:
            model = shard(model)
        device = torch.device(device)
        model.to_empty(device=device)
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            model.init_states(buffer_device=device)  # RoPE caches; the weights are replaced next
        load_hf_checkpoint(model, self.adapter(), self.path)
        return model

    def to_hf(self, titan_sd: dict[str, torch.Tensor], copy: bool = True, lazy_permute: bool = False) -> dict[str, torch.Tensor]:
        """TorchTitan names -> the checkpoint's names. `copy`, `lazy_permute`: as
        `rlsvc.models.hf_export.to_hf_state_dict` (only Llama permutes q/k)."""
        from rlsvc.models.hf_export import adapter_to_hf

        return adapter_to_hf(self.adapter(), titan_sd, copy, lazy_permute)

    def from_hf(self, hf_sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        sd = {k: v for k, v in hf_sd.items() if not k.endswith("rotary_emb.inv_freq")}
        return {k: v.contiguous() for k, v in self.adapter().from_hf(sd).items()}

    def save(self, folder: Path, hf_sd: dict[str, torch.Tensor], extra_files: dict[str, str] | None = None) -> Path:
        """The source folder with these weights: its config, tokenizer and chat template copied,
        the weights in the checkpoint's own dtype, written atomically."""
        from rlsvc.checkpoint import write_folder_atomically

        return write_folder_atomically(Path(folder), lambda tmp: self._write(tmp, hf_sd, extra_files or {}))

    def _write(self, tmp: Path, hf_sd: dict[str, torch.Tensor], extra_files: dict[str, str]) -> None:
        import torch
        from safetensors.torch import save_file

        for f in Path(self.path).iterdir():
            if f.is_file() and not f.name.endswith((".safetensors", ".safetensors.index.json", ".bin")) and f.name != "rlsvc.json":
                shutil.copy2(f, tmp / f.name)
        hf = self.hf_config()
        dtype = getattr(torch, str(hf.get("torch_dtype") or hf.get("dtype") or "float32"), torch.float32)
        tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in hf_sd.items()}
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        for name, text in extra_files.items():
            (tmp / name).write_text(text)

    def initial_folder(self, workdir: Path) -> Path:
        """The checkpoint itself: vLLM serves the same folder the trainer loaded."""
        return Path(self.path)


@functools.lru_cache(maxsize=8)
def _titan_config(path: str, seq_len: int) -> tuple[dict[str, Any], Any]:
    from rlsvc.models.hf_titan import read_hf_config, titan_config

    hf = read_hf_config(path)
    return hf, titan_config(hf, seq_len)


ModelSpec = ScratchModel | PretrainedModel


def as_spec(model: Any) -> ModelSpec:
    """A spec as is; a `TitanModelConfig` (the scratch shape, as tests and benchmarks pass it) as
    a `ScratchModel`."""
    return model if isinstance(model, ScratchModel | PretrainedModel) else ScratchModel(model)


def model_spec(model_cfg: Any) -> ModelSpec:
    """The spec for the config's `model` section (its `path` already a local folder)."""
    if model_cfg.source == "scratch":
        return ScratchModel(model_cfg.titan)
    return PretrainedModel(str(model_cfg.path), model_cfg.max_seq_len)
