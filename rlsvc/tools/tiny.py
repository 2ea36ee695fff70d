"""Tool calling for the tiny test checkpoints (`rlsvc.models.make_tiny_hf`): the family's real
chat template with tools and its tool tokens.

The tiny tokenizers carry short ChatML / Llama 3 templates without tools. `tool_tokenizer` gives
one the real template of its family (Qwen3's, `<think>` handling included, and Llama 3.1's, read
from the installed TRL package, which ships the families' templates for identity checks; none is
copied into this repository)
and the tokens those templates and vLLM's parsers use: Qwen3's `<tool_call>`, `</tool_call>`,
`<tool_response>`, `</tool_response>`, `<think>`, `</think>` (added, not special, as in Qwen3's
tokenizer, so decoded text keeps them), Llama 3's `<|python_tag|>` and `<|eom_id|>` (special).
`add_tool_support` does it to a checkpoint folder in place; its embedding has room (the config's
vocabulary rounds the tokenizer's up to a multiple of 64).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

FAMILY_TOOLS: dict[str, tuple[str, tuple[str, ...], bool]] = {
    # family: (template file, tokens, special)
    "qwen3": ("qwen3.jinja", ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"), False),
    "llama": ("llama3_1.jinja", ("<|python_tag|>", "<|eom_id|>"), True),
}


def tool_tokenizer(tokenizer: Any, family: str) -> Any:
    """`tokenizer` (changed in place, and returned) with `family`'s tool tokens and template."""
    if family not in FAMILY_TOOLS:
        raise ValueError(f"no tool template for family {family!r}; supported: {', '.join(FAMILY_TOOLS)}")
    template, tokens, special = FAMILY_TOOLS[family]
    if special:
        tokenizer.add_special_tokens({"additional_special_tokens": list(tokens)})
    else:
        tokenizer.add_tokens(list(tokens))
    tokenizer.chat_template = family_template(template)
    return tokenizer


def family_template(name: str) -> str:
    """A chat template as the installed TRL ships it (`trl/chat_templates/NAME`)."""
    from importlib import resources

    try:
        return (resources.files("trl") / "chat_templates" / name).read_text()
    except (ModuleNotFoundError, FileNotFoundError) as e:
        raise ValueError(f"the {name} chat template comes from the installed TRL package (pip install trl): {e}") from None


def add_tool_support(folder: str | Path, family: str) -> None:
    """Give the Hugging Face checkpoint in `folder` its family's tool tokens and template."""
    import json

    from transformers import AutoTokenizer

    folder = Path(folder)
    tokenizer = tool_tokenizer(AutoTokenizer.from_pretrained(folder), family)
    rows = json.loads((folder / "config.json").read_text())["vocab_size"]
    if len(tokenizer) > rows:
        raise ValueError(f"{folder}: {len(tokenizer)} tokens with the tool tokens, but the embedding has {rows} rows")
    tokenizer.save_pretrained(folder)
