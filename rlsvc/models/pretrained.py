"""`model.path` made into a checked local Hugging Face folder, before any cluster starts.

A local folder is used as is; `tiny:FAMILY` is written once by `rlsvc.models.make_tiny_hf` (a
small random model with a trained chat tokenizer, nothing downloaded); an `org/name` hub id is
fetched by `huggingface_hub` where a network exists. Then the folder is checked the way the job
will use it: a supported `model_type`, a tokenizer, a chat template when the task chats, a
vocabulary that fits the embedding, a sequence length the positions allow. Every problem is one
line (`HFModelError`); `rlsvc.train` prints it and exits 2.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from rlsvc.checkpoint import is_remote
from rlsvc.models.hf_titan import HFModelError, read_hf_config, titan_config
from rlsvc.models.spec import PretrainedModel

TINY_PREFIX = "tiny:"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def local_folder(path: str, output_dir: str, seed: int, tiny_init_std: float | None = None) -> Path:
    """The folder `model.path` names, made or fetched if it is `tiny:FAMILY` or a hub id
    (`tiny_init_std`: the tiny model's weight std, its family's default when None)."""
    if path.startswith(TINY_PREFIX):
        from rlsvc.models.make_tiny_hf import FAMILIES, make_tiny_hf

        family = path[len(TINY_PREFIX) :]
        if family not in FAMILIES:
            raise HFModelError(f"model.path: {path}: unknown tiny family (supported: {', '.join(FAMILIES)})")
        std = "" if tiny_init_std is None else f"-std{tiny_init_std:g}"
        # made locally: an object-store output_dir (s3://) keeps its tiny models in the temp folder
        base = Path(tempfile.gettempdir()) / "rlsvc" if is_remote(output_dir) else Path(output_dir)
        folder = base / "tiny-hf" / f"{family}-seed{seed}{std}"
        if not (folder / "config.json").is_file():
            make_tiny_hf(family, folder, seed=seed, init_std=tiny_init_std)  # atomic: a complete folder or none
        return folder
    folder = Path(path).expanduser()
    if folder.is_dir() or not _HUB_ID.match(path):
        return folder
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(path, allow_patterns=["*.json", "*.safetensors", "*.jinja", "tokenizer*", "*.txt"]))
    except Exception as e:  # offline, unknown repo, gated: the library's own reason, on one line
        raise HFModelError(
            f"model.path: {path} is not a local folder and could not be downloaded: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        ) from e


def load_tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder))
    except Exception as e:
        raise HFModelError(
            f"model.path: no usable tokenizer in {folder}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        ) from e


def check(folder: Path, max_seq_len: int, chat: bool) -> tuple[dict[str, Any], Any]:
    """(config.json, tokenizer) of a folder the job can train, or `HFModelError`."""
    hf = read_hf_config(folder)
    titan_config(hf, max_seq_len)  # rope scaling and the like it cannot build, as one line
    if not list(folder.glob("*.safetensors")):
        raise HFModelError(f"model.path: {folder} has no *.safetensors weights")
    tokenizer = load_tokenizer(folder)
    if chat and not getattr(tokenizer, "chat_template", None):
        raise HFModelError(f"model.path: the tokenizer in {folder} has no chat template (env.chat=true renders prompts with it)")
    if len(tokenizer) > int(hf["vocab_size"]):
        raise HFModelError(
            f"model.path: the tokenizer has {len(tokenizer)} tokens but the embedding only {hf['vocab_size']} rows (vocab_size)"
        )
    if tokenizer.eos_token_id is None:
        raise HFModelError(f"model.path: the tokenizer in {folder} has no eos token (an answer could not end)")
    positions = hf.get("max_position_embeddings")
    if positions is not None and max_seq_len > int(positions):
        raise HFModelError(f"model.max_seq_len ({max_seq_len}) exceeds the checkpoint's max_position_embeddings ({positions})")
    return hf, tokenizer


def prepare(model_cfg: Any, output_dir: str, seed: int, chat: bool) -> tuple[PretrainedModel, Any]:
    """The pretrained model's spec and its tokenizer, checked."""
    folder = local_folder(str(model_cfg.path), output_dir, seed, model_cfg.tiny_init_std)
    _, tokenizer = check(folder, model_cfg.max_seq_len, chat)
    return PretrainedModel(str(folder.resolve()), model_cfg.max_seq_len), tokenizer
