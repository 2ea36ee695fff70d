"""The trained policy as an MLflow pyfunc model ("models from code": MLflow copies this file into
the model, so loading it back needs torch and transformers, not rlsvc).

    policy = mlflow.pyfunc.load_model(f"runs:/{run_id}/policy")
    policy.predict(["player 15 dealer 10 ace no action :"])   # -> ["HIT"]

Input: prompts as the policy saw them in training (`rlsvc.policy_io` renders them; the model's
`input_example` shows one). Output: the greedy completion of each, at most `max_tokens` tokens,
restricted to the checkpoint's allowed answer tokens when training was (BlackJack's HIT/STAND).
The checkpoint folder (the model's `checkpoint` artifact) is the HF folder `rlsvc.train` saves.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
from mlflow.pyfunc import PythonModel


class PolicyModel(PythonModel):
    def load_context(self, context) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder = Path(context.artifacts["checkpoint"])
        meta_file = folder / "rlsvc.json"
        self.meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()

    def predict(self, context, model_input: list[str], params: dict | None = None) -> list[str]:
        import torch

        prompts = list(model_input["prompt"]) if hasattr(model_input, "columns") else list(model_input)
        max_tokens = int((params or {}).get("max_tokens") or self.meta.get("max_tokens", 1))
        allowed = self.meta.get("allowed_token_ids")
        bos = [self.tokenizer.bos_token_id] if self.tokenizer.bos_token_id is not None else []
        out = []
        for prompt in prompts:
            ids = self.tokenizer.encode(prompt, add_special_tokens=False)
            if self.meta.get("max_prompt_tokens"):  # as in training: keep the end of a long prompt
                ids = ids[-(self.meta["max_prompt_tokens"] - len(bos)) :]
            ids = bos + ids
            new: list[int] = []
            with torch.no_grad():
                for _ in range(max_tokens):  # greedy; one prompt at a time keeps positions exact
                    logits = self.model(input_ids=torch.tensor([ids + new])).logits[0, -1]
                    if allowed:
                        mask = torch.full_like(logits, float("-inf"))
                        mask[allowed] = 0.0
                        logits = logits + mask
                    token = int(logits.argmax())
                    if token == self.tokenizer.eos_token_id:
                        break
                    new.append(token)
            out.append(self.tokenizer.decode(new, skip_special_tokens=True))
        return out


mlflow.models.set_model(PolicyModel())
