"""`SavedPolicy.complete` decodes with the model's KV cache: its greedy answers must be the ones a
full forward pass per token gives (the way it decoded before, kept here as the reference)."""

from __future__ import annotations

import torch

from rlsvc.models.tokenizer import build_tokenizer
from rlsvc.saved_policy import SavedPolicy
from tests.conftest import tiny_hf_checkpoint


def full_forward_greedy(policy: SavedPolicy, prompt: str, budget: int) -> str:
    ids, new = policy.encode(prompt), list[int]()
    with torch.no_grad():
        for _ in range(budget):
            token = int(policy.model(input_ids=torch.tensor([ids + new])).logits[0, -1].argmax())
            if token == policy.tokenizer.eos_token_id:
                break
            new.append(token)
    return policy.tokenizer.decode(new, skip_special_tokens=True)


def test_cached_greedy_decoding_equals_a_full_forward_per_token(tmp_path):
    model = tiny_hf_checkpoint("qwen3", tmp_path / "m")
    policy = SavedPolicy(model, build_tokenizer("chars"), {"max_tokens": 40})
    prompts = ["Ann has 3 eggs.", "1+2=", "hit or stand?"]
    answers = policy.complete(prompts)
    assert answers == [full_forward_greedy(policy, p, 40) for p in prompts]
    assert sum(map(len, answers)) >= 40  # the comparison covers many decoded tokens, not only an eos
