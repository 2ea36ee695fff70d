"""A rollout worker is built from a typed EngineSpec (rlsvc/rollout/spec.py): the job's comes
from the config's rollout section; it splits into the engine's settings and its sampling."""

from __future__ import annotations

import json

from rlsvc.config import load_config
from rlsvc.rollout.spec import EngineSpec


def test_the_jobs_engine_follows_the_config():
    cfg = load_config(
        None, ["rollout.temperature=0.7", "rollout.max_tokens=3", "rollout.kv_cache_gb=2", "rollout.block_size=64", "run.seed=5"]
    )
    spec = EngineSpec.from_config(cfg, [11, 12])
    assert spec.engine_kwargs() == {
        "max_model_len": cfg.model.titan.max_seq_len,
        "seed": 5,
        "gpu_memory_utilization": 0.3,
        "kv_cache_gb": 2,
        "block_size": 64,
        "enforce_eager": True,
        "dtype": "auto",
        "max_num_seqs": 1024,
        "tensor_parallel_size": 1,
    }
    assert spec.sampling() == {"temperature": 0.7, "max_tokens": 3, "min_tokens": 0, "allowed_token_ids": [11, 12]}
    assert spec.sampling(greedy=True)["temperature"] == 0.0
    assert EngineSpec.from_config(cfg, None).sampling()["allowed_token_ids"] is None


def test_the_cpu_kv_cache_holds_a_full_batch_and_no_more(tmp_path):
    from rlsvc.rollout.vllm_engine import kv_cache_bytes

    # the built-in policy's shape: 2 layers, 2 KV heads of 32, float32: 1 KiB a token
    shape = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 128}
    (tmp_path / "config.json").write_text(json.dumps(shape))
    full = (1024 * 1 + 1) * 32 * 1024  # 1024 sequences of one 32-token block, and a spare block
    assert kv_cache_bytes(str(tmp_path), 1024, 32, 32, "float32", 1.0) == full
    assert kv_cache_bytes(str(tmp_path), 1024, 33, 32, "float32", 1.0) == (1024 * 2 + 1) * 32 * 1024  # whole blocks
    assert kv_cache_bytes(str(tmp_path), 1024, 32, 32, "bfloat16", 1.0) == full // 2
    assert kv_cache_bytes(str(tmp_path), 1024, 32, 32, "float32", 0.01) == int(0.01 * 2**30)  # the cap
    (tmp_path / "config.json").write_text(json.dumps({**shape, "head_dim": 64}))
    assert kv_cache_bytes(str(tmp_path), 1024, 32, 32, "float32", 1.0) == 2 * full
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "unknown"}))
    assert kv_cache_bytes(str(tmp_path), 1024, 32, 32, "float32", 1.5) == int(1.5 * 2**30)
