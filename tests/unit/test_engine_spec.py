"""A rollout worker is built from a typed EngineSpec (rlsvc/rollout/spec.py): the job's comes
from the config's rollout section; it splits into the engine's settings and its sampling."""

from __future__ import annotations

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
