"""Make a tiny, randomly initialised Hugging Face checkpoint of a real model family.

    python -m rlsvc.models.make_tiny_hf --family qwen3|llama|qwen2 --out DIR [--seed S]
        [--vocab-size N] [--hidden-size H] [--layers L] [--heads A] [--kv-heads K]
        [--head-dim D] [--intermediate-size I] [--max-position 512] [--init-std 0.02]
        [--tie-word-embeddings | --no-tie-word-embeddings] [--corpus FILE]

The folder is what a real pretrained checkpoint of the family looks like to `transformers` and
vLLM (`config.json` with the family's `model_type` and architecture, float32 safetensors,
`generation_config.json`, a byte-level BPE chat tokenizer from `rlsvc.models.hf_tokenizer`), only
small enough for CPU tests, so the real loading paths are tested without downloading weights.
The tokenizer is trained on a fixed mixed corpus, or with `--corpus FILE` on the text the model
will learn (a JSONL file's string fields, e.g. the generator's train.jsonl; any other file's lines).

Shape conventions follow the real families: Qwen2/2.5 have q/k/v biases, Qwen3 has q/k RMSNorm,
no biases and an explicit `head_dim`, Llama 3 has no biases and `rope_theta=500000`; the small
Qwen checkpoints tie the input and output embeddings, Llama 3 does not. `--vocab-size` is the
tokenizer's size; `config.json`'s `vocab_size` rounds it up to a multiple of 64, so (as in real
checkpoints) the embedding has rows no token uses. The end-of-turn token (`<|im_end|>`,
`<|eot_id|>`) is the eos of the config, the tokenizer and `generation_config.json`.

The folder is written next to `--out` under a temporary name and renamed into place, so it is
either complete or absent. An existing non-empty `--out` is refused (exit 2).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from rlsvc.models.hf_tokenizer import STYLES

FAMILIES = ("llama", "qwen2", "qwen3")

# Small enough for CPU tests; head_dim exactly 32 (vLLM's CPU attention needs >= 32).
COMMON_DEFAULTS: dict[str, Any] = {
    "vocab_size": 720,  # tokenizer size; config.json pads to 768
    "hidden_size": 128,
    "layers": 2,
    "heads": 4,
    "kv_heads": 2,
    "head_dim": 32,
    "intermediate_size": 256,
    "max_position": 512,
    # std of the random weights (config `initializer_range`). 0.02, the families' value, gives
    # a near-uniform next-token distribution whose greedy choice, with tied embeddings, mostly
    # repeats the last token; ~0.1 gives logits of std ~1 and varied greedy continuations.
    "init_std": 0.02,
    # the tokenizer's training text: None, the fixed mixed corpus; else a file (`corpus_file`)
    "corpus": None,
}
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen3": {"tie_word_embeddings": True, "rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6},
    "qwen2": {"tie_word_embeddings": True, "rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6},
    "llama": {"tie_word_embeddings": False, "rope_theta": 500_000.0, "rms_norm_eps": 1e-5},
}
VOCAB_MULTIPLE = 64


class RefusedError(ValueError):
    """A request the maker refuses (unknown family, existing non-empty folder); one-line message."""


def defaults(family: str) -> dict[str, Any]:
    """Every setting `make_tiny_hf` uses for `family` when not overridden."""
    _check_family(family)
    return {**COMMON_DEFAULTS, **FAMILY_DEFAULTS[family], "seed": 0, "tokenizer_seed": 0}


def _check_family(family: str) -> None:
    if family not in FAMILIES:
        raise RefusedError(f"unknown family {family!r}; supported: {', '.join(FAMILIES)}")


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise RefusedError(f"refusing to write into {out}: it exists and is not an empty folder")


def padded_vocab(n: int, multiple: int = VOCAB_MULTIPLE) -> int:
    return -(-n // multiple) * multiple


def build_config(family: str, settings: dict[str, Any], tokenizer: Any):
    """The family's `transformers` config for `settings` and the tokenizer's special tokens."""
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    s = settings
    eos_id = tokenizer.convert_tokens_to_ids(STYLES[family].eos)
    bos_id = tokenizer.bos_token_id
    common = {
        "vocab_size": padded_vocab(len(tokenizer)),
        "hidden_size": s["hidden_size"],
        "intermediate_size": s["intermediate_size"],
        "num_hidden_layers": s["layers"],
        "num_attention_heads": s["heads"],
        "num_key_value_heads": s["kv_heads"],
        "max_position_embeddings": s["max_position"],
        "rms_norm_eps": s["rms_norm_eps"],
        "rope_parameters": {"rope_type": "default", "rope_theta": s["rope_theta"]},
        "tie_word_embeddings": s["tie_word_embeddings"],
        "hidden_act": "silu",
        "initializer_range": s["init_std"],
        "eos_token_id": eos_id,
        "pad_token_id": tokenizer.pad_token_id,
        "dtype": "float32",
    }
    if family == "llama":
        if s["heads"] * s["head_dim"] != s["hidden_size"]:
            raise ValueError(f"llama: heads * head_dim ({s['heads']} * {s['head_dim']}) must equal hidden_size {s['hidden_size']}")
        return LlamaConfig(**common, bos_token_id=bos_id, head_dim=s["head_dim"], attention_bias=False, mlp_bias=False)
    if family == "qwen2":
        # Qwen2 has no head_dim setting (hidden_size / heads) and always biases q/k/v
        if s["heads"] * s["head_dim"] != s["hidden_size"]:
            raise ValueError(f"qwen2: head_dim is hidden_size / heads ({s['hidden_size']} / {s['heads']}), not {s['head_dim']}")
        # the real Qwen2.5 configs name <|endoftext|> as bos although the tokenizer adds none
        return Qwen2Config(**common, bos_token_id=tokenizer.pad_token_id, use_sliding_window=False, max_window_layers=s["layers"])
    # qwen3: explicit head_dim (need not be hidden_size / heads), q/k norm, no bias
    return Qwen3Config(
        **common,
        bos_token_id=tokenizer.pad_token_id,
        head_dim=s["head_dim"],
        attention_bias=False,
        use_sliding_window=False,
        max_window_layers=s["layers"],
    )


def make_tiny_hf(family: str, out: str | Path, **overrides: Any) -> Path:
    """Write a tiny random `family` checkpoint (model, tokenizer, generation config) to `out`.

    `overrides` are any keys of `defaults(family)`: vocab_size (the tokenizer's), hidden_size,
    layers, heads, kv_heads, head_dim, intermediate_size, max_position, tie_word_embeddings,
    rope_theta, rms_norm_eps, init_std, seed (weights), tokenizer_seed (the mixed corpus), corpus
    (a file to train the tokenizer on instead). Returns `out`. Raises `RefusedError` for an unknown
    family or an existing non-empty `out`, ValueError for a corpus file without text.
    """
    _check_family(family)
    out = Path(out)
    _check_out(out)
    settings = defaults(family)
    unknown = set(overrides) - set(settings)
    if unknown:
        raise TypeError(f"unknown settings {sorted(unknown)}; expected some of {sorted(settings)}")
    settings.update({k: v for k, v in overrides.items() if v is not None})

    import torch
    from transformers import GenerationConfig, LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM

    from rlsvc.models.hf_tokenizer import build_chat_tokenizer, corpus_file

    texts = corpus_file(settings["corpus"]) if settings["corpus"] is not None else None
    tokenizer = build_chat_tokenizer(family, vocab_size=settings["vocab_size"], seed=settings["tokenizer_seed"], texts=texts)
    config = build_config(family, settings, tokenizer)
    model_cls = {"llama": LlamaForCausalLM, "qwen2": Qwen2ForCausalLM, "qwen3": Qwen3ForCausalLM}[family]
    torch.manual_seed(settings["seed"])
    model = model_cls(config).float().eval()
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700
        _check_out(out)  # again: something may have appeared while writing
        # rename replaces an empty folder and fails (ENOTEMPTY) on a non-empty one
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rlsvc.models.make_tiny_hf", description=__doc__.split("\n\n")[0])
    p.add_argument("--family", required=True, help=f"one of {', '.join(FAMILIES)}")
    p.add_argument("--out", required=True, type=Path, help="folder to create (absent or empty)")
    p.add_argument("--seed", type=int, help="weight initialisation seed (default 0)")
    p.add_argument(
        "--vocab-size", type=int, help=f"tokenizer size (default {COMMON_DEFAULTS['vocab_size']}); config pads to x{VOCAB_MULTIPLE}"
    )
    p.add_argument("--hidden-size", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--head-dim", type=int, help="qwen3: any; llama/qwen2: must be hidden_size / heads")
    p.add_argument("--intermediate-size", type=int)
    p.add_argument("--max-position", type=int)
    p.add_argument("--init-std", type=float, help="std of the random weights (default 0.02)")
    p.add_argument(
        "--tie-word-embeddings", action=argparse.BooleanOptionalAction, default=None, help="default: on for qwen2/qwen3, off for llama"
    )
    p.add_argument("--corpus", type=Path, help="train the tokenizer on this file (JSONL: its string fields; else its lines)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if k not in ("family", "out")}
    try:
        out = make_tiny_hf(args.family, args.out, **overrides)
    except (RefusedError, ValueError) as exc:
        print(f"make_tiny_hf: {exc}", file=sys.stderr)
        return 2
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(out))
    print(
        f"wrote {out}: {config.model_type} hidden={config.hidden_size} layers={config.num_hidden_layers} "
        f"heads={config.num_attention_heads}/{config.num_key_value_heads} vocab={config.vocab_size} "
        f"tie={config.tie_word_embeddings}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
