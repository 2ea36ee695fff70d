"""The policy model a job trains and how its saved copies are described: the initial weights'
source, the trainer's set-up on (new) ranks, and `rlsvc.json` beside every saved policy."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlsvc.config import Config
from rlsvc.models.spec import ModelSpec, ScratchModel
from rlsvc.policy_io import TaskCodec
from rlsvc.trainer.titan_trainer import TrainerSpec

CHECKPOINT_META = "rlsvc.json"


def prepare_model(cfg: Config) -> tuple[ModelSpec, Any, dict[str, Any]]:
    """The policy model, its tokenizer, and where rollout workers get the initial checkpoint:
    a model built from scratch is a temporary folder (its config, tokenizer and zero weights, which
    the first weight sync replaces) whose files travel through Ray; a pretrained one is served
    from its own folder (which every rollout node must see)."""
    from rlsvc.models.tokenizer import load_tokenizer

    if cfg.model.source == "hf":
        from rlsvc.models.pretrained import prepare

        spec, tokenizer = prepare(cfg.model, cfg.run.output_dir, cfg.run.seed, getattr(cfg.env, "chat", False))
        return spec, tokenizer, {"path": spec.path}
    scratch = ScratchModel(cfg.model.titan)
    with tempfile.TemporaryDirectory(prefix="rlsvc-init-") as tmp:
        folder = scratch.initial_folder(Path(tmp))
        files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
        return scratch, load_tokenizer(folder), {"files": files}


def setup_trainers(cfg: Config, svc: Any, model: ModelSpec, allowed_token_ids: Sequence[int] | None) -> TrainerSpec:
    """Build the trainer on every rank from the model (a restarted policy group; the job builds its
    first spec at start-up, to share it with the reference)."""
    spec = TrainerSpec.from_config(model, cfg, allowed_token_ids)
    svc.trainer_group.setup(spec)
    return spec


def policy_meta(cfg: Config, codec: TaskCodec, version: int) -> dict[str, Any]:
    """rlsvc.json beside a saved policy's weights: how `rlsvc.eval` and the MLflow model prompt it."""
    return {
        "allowed_token_ids": codec.allowed_token_ids,
        "prompt": codec.prompt_format,
        "system_prompt": getattr(codec.task, "system", None) if codec.task.chat else None,
        "task": codec.task.name,
        "policy_version": version,
        # how the MLflow pyfunc model (rlsvc/tracking/policy_pyfunc.py) decodes, as training did
        "max_tokens": cfg.rollout.max_tokens,
        "max_prompt_tokens": cfg.model.seq_len - cfg.rollout.max_tokens,
    }


def policy_files(cfg: Config, codec: TaskCodec, version: int) -> dict[str, str]:
    """The files saved beside a policy's weights (name -> text)."""
    return {CHECKPOINT_META: json.dumps(policy_meta(cfg, codec, version), indent=2)}


ADAPTER = "adapter"
"""With LoRA: the run folder's PEFT adapter folder of the last policy (beside the merged `final/`)."""


def save_adapter(cfg: Config, svc: Any, model: ModelSpec, codec: TaskCodec, version: int, folder: Path) -> Path | None:
    """With LoRA, the policy's adapters as a PEFT folder (adapter_config.json,
    adapter_model.safetensors) that `peft.PeftModel.from_pretrained` loads on the base checkpoint,
    with rlsvc.json beside them; None without LoRA."""
    from rlsvc.trainer.lora import LoraSettings, save_peft_adapter

    settings = LoraSettings.from_config(cfg.model.lora)
    if settings is None:
        return None
    saved = save_peft_adapter(folder, svc.trainer_group.peft_adapter_state_dict(), settings, str(getattr(model, "path", "")))
    for name, text in policy_files(cfg, codec, version).items():
        (saved / name).write_text(text)
    return saved


def save_final(cfg: Config, model: ModelSpec, state: dict, version: int, codec: TaskCodec, folder: Path) -> Path:
    return model.save(folder, state, extra_files=policy_files(cfg, codec, version))
