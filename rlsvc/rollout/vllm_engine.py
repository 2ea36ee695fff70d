"""A vLLM engine for rollouts: batched generation over token ids, behaviour logprobs, and
in-place weight updates of the live engine.

The class is plain (no Ray) so it can be tested directly; `rlsvc.cluster` wraps it in an actor.
vLLM's engine core and its single worker run *inside the calling process*
(`VLLM_ENABLE_V1_MULTIPROCESSING=0` plus the "uni" executor). That is what makes it safe to
construct inside a Ray actor: nothing is spawned, so there is no `if __name__ == "__main__"`
requirement, and the weight-update / fingerprint RPCs are plain function calls, so no callable
has to be pickled (no `VLLM_ALLOW_INSECURE_SERIALIZATION`).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from vllm import LLM

# Returned logprobs are those of the distribution the token was actually sampled from: after
# the allowed-token mask, temperature and top-p ("processed"), not the raw model softmax.
# This is what the GRPO ratio needs as the behaviour policy.
LOGPROBS_MODE = "processed_logprobs"


def _configure_vllm_env(kv_cache_gb: int) -> None:
    """Set the environment vLLM reads at engine construction (must run before `vllm.LLM`)."""
    # In-process engine core: no spawned EngineCore/worker processes, which is what lets the
    # engine start inside a Ray actor (or any non-main process) and keeps RPCs as direct calls.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if not torch.cuda.is_available():
        # On CPU the KV cache size is taken from this variable (GiB), not from memory profiling.
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_gb)


def _state_dict_to_bytes(state_dict: dict[str, torch.Tensor]) -> bytes:
    """Serialise to safetensors bytes: a flat, transport-neutral payload (no pickle)."""
    from safetensors.torch import save

    # safetensors refuses shared or non-contiguous storage; tied/viewed tensors are common in HF
    # state dicts, so give each entry its own contiguous CPU copy.
    flat = {k: v.detach().to("cpu").contiguous().clone() for k, v in state_dict.items()}
    return save(flat)


def _checkpoint_keys(model_dir: str) -> set[str]:
    """Tensor names in the checkpoint's safetensors files (headers only, no tensor data)."""
    from safetensors import safe_open

    keys: set[str] = set()
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            keys.update(f.keys())
    return keys


def _iter_safetensors(payload: bytes) -> Iterator[tuple[str, torch.Tensor]]:
    from safetensors.torch import load

    yield from load(payload).items()


def _rpc_reload_weights(worker: Any, payload: bytes) -> None:
    """Runs on the vLLM worker: reload checkpoint-format weights into the live model.

    `reload_weights(..., is_checkpoint_format=True)` re-runs the model's own `load_weights`
    (name mapping, q/k/v and gate/up packing) and then the post-load processing that CPU linear
    layers need; calling `model.load_weights` directly fails once those layers are packed.
    """
    worker.model_runner.reload_weights(weights_iterator=_iter_safetensors(payload), is_checkpoint_format=True)


def _rpc_fingerprint(worker: Any) -> str:
    """Runs on the vLLM worker: sha256 over (name, dtype, shape, bytes) of every parameter."""
    digest = hashlib.sha256()
    model = worker.model_runner.get_model()
    for name, param in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        tensor = param.detach().to("cpu").contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}".encode())
        # view as bytes so every dtype (bf16 included) hashes without a numpy round trip
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _logprob_of(step_logprobs: Any, token_id: int) -> float:
    """The logprob vLLM recorded for the sampled token at one position."""
    return float(step_logprobs[token_id].logprob)


class VLLMEngine:
    """One in-process vLLM engine serving a policy checkpoint (HF format directory)."""

    def __init__(
        self,
        model_dir: str,
        *,
        seed: int = 0,
        max_model_len: int = 32,
        gpu_memory_utilization: float = 0.3,
        kv_cache_gb: int = 1,
        enforce_eager: bool = True,
        dtype: str = "float32",
        max_num_seqs: int = 1024,
    ) -> None:
        _configure_vllm_env(kv_cache_gb)
        from vllm import LLM

        self.model_dir = model_dir
        self.version = 0
        # vLLM's reload only *logs* weights it did not receive; an RL step must not silently
        # keep stale tensors, so updates are checked against the checkpoint's names up front.
        self._expected_keys = _checkpoint_keys(model_dir)
        self._llm: LLM | None = LLM(
            model=model_dir,
            tokenizer=model_dir,
            seed=seed,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager,
            dtype=dtype,
            # "uni" keeps the single worker in this process (with multiprocessing off above).
            distributed_executor_backend="uni",
            logprobs_mode=LOGPROBS_MODE,
            # one scheduler step for a whole rollout batch (vLLM's default is 256 sequences)
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max(max_num_seqs * max_model_len, 4096),
        )

    @property
    def llm(self) -> LLM:
        if self._llm is None:
            raise RuntimeError("VLLMEngine is closed")
        return self._llm

    def generate(
        self,
        prompt_token_ids: list[list[int]],
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_tokens: int = 1,
        allowed_token_ids: list[int] | None = None,
        seed: int | None = None,
        seeds: list[int] | None = None,
    ) -> list[dict]:
        """Sample a continuation for every prompt in one batched call.

        Returns, per prompt, `{"token_ids", "logprobs", "text"}` where `logprobs[i]` is the
        log-probability of `token_ids[i]` under the distribution it was sampled from
        (mask to `allowed_token_ids`, then `/ temperature`, then top-p). With `seed`, prompt
        `i` uses seed `seed + i`: one shared seed would give every prompt of a GRPO group the
        same noise and hence the same sample. `seeds` gives each prompt its own seed instead.
        """
        if seeds is not None and len(seeds) != len(prompt_token_ids):
            raise ValueError(f"{len(seeds)} seeds for {len(prompt_token_ids)} prompts")
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=list(ids)) for ids in prompt_token_ids]
        params = [
            SamplingParams(
                temperature=temperature,
                top_p=top_p,
                max_tokens=max_tokens,
                allowed_token_ids=allowed_token_ids,
                seed=seeds[i] if seeds is not None else None if seed is None else seed + i,
                logprobs=0,  # 0 = only the sampled token's logprob
            )
            for i in range(len(prompts))
        ]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [self._to_result(out.outputs[0]) for out in outputs]

    @staticmethod
    def _to_result(completion: Any) -> dict:
        token_ids = list(completion.token_ids)
        logprobs = [_logprob_of(step, tok) for step, tok in zip(completion.logprobs, token_ids, strict=True)]
        return {"token_ids": token_ids, "logprobs": logprobs, "text": completion.text}

    def update_weights(self, hf_state_dict: dict[str, torch.Tensor], version: int) -> dict[str, float]:
        """Load a full HF-format state dict into the live engine; returns phase timings."""
        missing = self._expected_keys - hf_state_dict.keys()
        if missing:
            raise ValueError(
                f"update_weights(version={version}): state dict lacks {len(missing)} checkpoint tensors, e.g. {sorted(missing)[:3]}"
            )
        t0 = time.perf_counter()
        payload = _state_dict_to_bytes(hf_state_dict)
        t1 = time.perf_counter()
        self.llm.collective_rpc(_rpc_reload_weights, args=(payload,))
        # Cached prefixes hold KV computed with the old weights; generate() is synchronous, so
        # no request is running and the reset can only fail if that assumption breaks.
        if not self.llm.reset_prefix_cache():
            raise RuntimeError(f"update_weights(version={version}): prefix cache reset refused (requests in flight?)")
        t2 = time.perf_counter()
        self.version = version
        return {"serialize_s": t1 - t0, "load_s": t2 - t1}

    def weights_fingerprint(self) -> str:
        """sha256 of the engine's live parameters (the single worker's answer)."""
        (digest,) = self.llm.collective_rpc(_rpc_fingerprint)
        return digest

    def close(self) -> None:
        """Shut the engine core down and release its memory; safe to call twice."""
        if self._llm is None:
            return
        llm, self._llm = self._llm, None
        # InprocClient.shutdown: executor/worker teardown, KV cache freed, and the
        # torch.distributed group vLLM created in this process destroyed.
        llm.llm_engine.engine_core.shutdown()
