"""A saved policy, loaded and queried the way training prompted it, for any task.

    from rlsvc.saved_policy import SavedPolicy
    policy = SavedPolicy.load("runs/<run>/checkpoint")
    policy.complete(["3+4="])                                   # -> ["7"]
    policy.complete([[{"role": "user", "content": "Hi?"}]])     # chat messages, as a chat task renders them

The folder is what `rlsvc.train` saves: a Hugging Face causal LM with its tokenizer, and rlsvc.json
(how training decoded: the allowed answer tokens, the longest prompt, the answer budget).
`prompt_ids` is the one prompt encoding: training (`rlsvc.policy_io.TaskCodec`), this class and the
MLflow model (rlsvc/tracking/policy_pyfunc.py) all encode through it. This module imports nothing
else of rlsvc; torch and transformers only when a policy is loaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

META_FILE = "rlsvc.json"
CHAT_OPTIONS = {"enable_thinking": False}
"""Passed to every chat template: Qwen3's would otherwise let the model open a `<think>` block
that a short answer budget cuts off (templates without the variable ignore it)."""


class CheckpointError(ValueError):
    """No usable checkpoint or saved policy: a missing folder, every training checkpoint in it
    incomplete or corrupt (rlsvc/checkpoint.py), a folder that is not a saved policy, or one whose
    rlsvc.json does not read. Defined here, not in rlsvc/checkpoint.py, because this module is
    shipped alone inside MLflow models."""


def prompt_ids(tokenizer: Any, prompt: str | list[dict[str, str]], max_prompt_tokens: int | None = None) -> list[int]:
    """The tokens the policy reads for `prompt`: the tokenizer's start token, then the text (or
    the chat messages through the tokenizer's chat template and its generation prompt); a prompt
    longer than `max_prompt_tokens` (start token included) keeps its end, the latest output and
    the cue."""
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    if isinstance(prompt, str):
        ids = list(tokenizer.encode(prompt, add_special_tokens=False))
    else:
        out = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, **CHAT_OPTIONS)
        out = out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out
        # the template writes its own start token; it is added in front below like any prompt's
        ids = list(out[1:] if bos and out and out[0] == bos[0] else out)
    if max_prompt_tokens is not None:
        ids = ids[-(max_prompt_tokens - len(bos)) :]
    return bos + ids


def read_meta(folder: Path) -> dict[str, Any]:
    """The folder's rlsvc.json ({} when it has none)."""
    meta_file = folder / META_FILE
    try:
        return json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    except (OSError, ValueError) as e:
        raise CheckpointError(f"unreadable {meta_file}: {e}") from None


def check_folder(folder: Path) -> None:
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder not found: {folder}")
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"not a Hugging Face checkpoint (no config.json): {folder}")


class SavedPolicy:
    """A causal LM and its tokenizer, prompted and decoded as training did."""

    def __init__(self, model: Any, tokenizer: Any, meta: dict[str, Any] | None = None) -> None:
        self.model, self.tokenizer, self.meta = model, tokenizer, meta or {}

    @classmethod
    def load(cls, folder: str | Path, device: str = "cpu") -> SavedPolicy:
        """The policy saved in `folder` (raises CheckpointError when it is not one)."""
        path = Path(folder)
        check_folder(path)
        meta = read_meta(path)
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model: Any = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
        return cls(model.to(device).eval(), AutoTokenizer.from_pretrained(str(path)), meta)

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device

    def encode(self, prompt: str | list[dict[str, str]]) -> list[int]:
        return prompt_ids(self.tokenizer, prompt, self.meta.get("max_prompt_tokens") or None)

    def complete(self, prompts: list[Any], max_tokens: int | None = None) -> list[str]:
        """The greedy completion of each prompt (text or chat messages): at most `max_tokens`
        tokens (default: training's answer budget), stopping at the end-of-sequence token, over the
        checkpoint's allowed answer tokens when training was constrained to them."""
        import torch

        budget = int(max_tokens or self.meta.get("max_tokens") or 1)
        allowed = self.meta.get("allowed_token_ids")
        answers = []
        for prompt in prompts:
            new: list[int] = []
            step, past = torch.tensor([self.encode(prompt)], device=self.device), None
            with torch.no_grad():
                # One prompt at a time keeps positions exact (no padding); the model's KV cache
                # feeds each step only the newest token (a full forward per token took most of a
                # 500-problem evaluation of the tiny reasoning model).
                for _ in range(budget):
                    out = self.model(input_ids=step, past_key_values=past, use_cache=True)
                    past, logits = out.past_key_values, out.logits[0, -1]
                    if allowed:
                        mask = torch.full_like(logits, float("-inf"))
                        mask[allowed] = 0.0
                        logits = logits + mask
                    token = int(logits.argmax())
                    if token == self.tokenizer.eos_token_id:
                        break
                    new.append(token)
                    step = torch.tensor([[token]], device=self.device)
            answers.append(self.tokenizer.decode(new, skip_special_tokens=True))
        return answers
