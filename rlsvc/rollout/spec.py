"""What a rollout worker is built from: its vLLM engine's settings and how it samples, typed
(the job makes it from the config's `rollout` section; benchmarks set their own knobs)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class EngineSpec:
    max_model_len: int
    """Longest prompt + completion the engine accepts (the model's `max_seq_len`)."""
    seed: int = 0
    """The engine's seed; every request also carries its own sampling seed."""
    gpu_memory_utilization: float = 0.3
    """vLLM's memory fraction (on CPU the KV cache is bounded by `kv_cache_gb`)."""
    kv_cache_gb: float = 1.0
    """Most KV cache on CPU, GiB; no more than `max_num_seqs` sequences of `max_model_len` take."""
    block_size: int | None = None
    """KV cache block size in tokens (None: 32 on CPU, vLLM's default on GPU)."""
    enforce_eager: bool = True
    """No CUDA graphs or compilation."""
    dtype: str = "float32"
    """Engine weights and compute (`auto`: bfloat16 with CUDA, float32 on CPU)."""
    max_num_seqs: int = 1024
    """Sequences per engine step."""
    tensor_parallel_size: int = 1
    """GPUs the policy is split over."""
    temperature: float = 1.0
    """Sampling temperature (greedy calls use 0)."""
    max_tokens: int = 1
    """Tokens sampled per decision."""
    min_tokens: int = 0
    """Tokens sampled before an end-of-sequence may stop a completion."""
    allowed_token_ids: tuple[int, ...] | None = None
    """Constrained decoding: only these tokens may be sampled."""
    lora_rank: int | None = None
    """Serve LoRA adapters of this rank on the checkpoint (`model.lora`); None: full weights."""
    lora_versions: int = 1
    """Adapter versions an engine keeps registered (`buffer.max_staleness + 1`)."""
    keep_freed_memory: bool = True
    """The worker process keeps the memory it frees (rlsvc/malloc.py): each weight update's
    repacked linear weights reuse the pages the previous ones held instead of new mappings."""

    @classmethod
    def from_config(cls, cfg: Any, allowed_token_ids: list[int] | None) -> EngineSpec:
        """The job's engine: `rollout` settings, the model's length, the run seed."""
        r = cfg.rollout
        return cls(
            max_model_len=cfg.model.seq_len,
            seed=cfg.run.seed,
            gpu_memory_utilization=r.gpu_memory_utilization,
            kv_cache_gb=r.kv_cache_gb,
            block_size=r.block_size,
            enforce_eager=r.enforce_eager,
            dtype=r.dtype,
            tensor_parallel_size=r.tensor_parallel_size,
            temperature=r.temperature,
            max_tokens=r.max_tokens,
            allowed_token_ids=tuple(allowed_token_ids) if allowed_token_ids is not None else None,
            keep_freed_memory=r.keep_freed_memory,
            lora_rank=cfg.model.lora.rank if cfg.model.lora.enabled else None,
            lora_versions=cfg.buffer.max_staleness + 1,
        )

    def engine_kwargs(self) -> dict[str, Any]:
        """VLLMEngine's keyword arguments: everything but sampling and the worker process's own settings."""
        skip = {*self.sampling(), "keep_freed_memory", *(("lora_rank", "lora_versions") if self.lora_rank is None else ())}
        return {k: v for k, v in asdict(self).items() if k not in skip}

    def sampling(self, greedy: bool = False) -> dict[str, Any]:
        ids = list(self.allowed_token_ids) if self.allowed_token_ids is not None else None
        return {
            "temperature": 0.0 if greedy else self.temperature,
            "max_tokens": self.max_tokens,
            "min_tokens": self.min_tokens,
            "allowed_token_ids": ids,
        }
