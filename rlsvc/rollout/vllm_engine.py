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
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from rlsvc.rollout import cpu_norms
from rlsvc.weight_sync.manifest import Digest, Manifest, build_manifest, digest_tensors

if TYPE_CHECKING:
    from vllm import LLM

# Returned logprobs are those of the distribution the token was actually sampled from: after
# the allowed-token mask, temperature and top-p ("processed"), not the raw model softmax.
# This is what the GRPO ratio needs as the behaviour policy.
LOGPROBS_MODE = "processed_logprobs"


def _configure_vllm_env() -> None:
    """Set the environment vLLM reads at engine construction (must run before `vllm.LLM`)."""
    # In-process engine core: no spawned EngineCore/worker processes, which is what lets the
    # engine start inside a Ray actor (or any non-main process) and keeps RPCs as direct calls.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    # The KV cache size is the engine's argument (`kv_cache_bytes`); vLLM's CPU platform would
    # let this legacy variable override it.
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)


def kv_cache_bytes(model_dir: str, max_num_seqs: int, max_model_len: int, block_size: int, dtype: str, cap_gb: float) -> int:
    """The CPU KV cache: what `max_num_seqs` sequences of `max_model_len` tokens take in the
    checkpoint's model (every layer's keys and values, whole blocks, one spare), and at most
    `cap_gb` GiB. Beyond that no request ever waits for room, and the pages are allocated and
    zeroed at start-up (1 GiB took about 2 s of a job's start-up for a model that needed 32 MiB).
    A config.json that does not give the attention shape gets the cap."""
    cap = int(cap_gb * 2**30)
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    cfg = cfg.get("text_config", cfg)
    layers, heads = cfg.get("num_hidden_layers"), cfg.get("num_attention_heads")
    if not layers or not heads:
        return cap
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    per_token = layers * 2 * cfg.get("num_key_value_heads", heads) * head_dim * torch.tensor([], dtype=getattr(torch, dtype)).element_size()
    blocks = max_num_seqs * -(-max_model_len // block_size) + 1
    return min(cap, blocks * block_size * per_token)


def engine_dtype(dtype: str) -> str:
    """`auto`: bfloat16 where CUDA exists, float32 on CPU (vLLM's own `auto` would follow the
    checkpoint's dtype, float32 for the policies the trainer exports)."""
    if dtype == "auto":
        return "bfloat16" if torch.cuda.is_available() else "float32"
    return dtype


def _keep_linear_weights_as_parameters() -> None:
    """CPU only: keep every linear layer's weight a live, plain parameter.

    After loading, vLLM's CPU backend packs each linear weight into a oneDNN handle (or its
    small-GEMM kernel's layout) and frees the parameter. An RL engine pays twice for that: every
    update would re-allocate, reload and repack the whole model (measured: ~0.4 GB/s for a 107M
    model), and the live weights could no longer be read back to prove what the engine serves.
    vLLM's per-layer switch `_cpu_skip_gemm_dispatch` (set on MLA's kv_b_proj), set on the class
    before the engine is built, keeps the parameters; `_pack_linears` then builds the packed
    kernels from them, keeping both, and again after every update. An update is an in-place copy
    per tensor plus a repack, and `weights_fingerprint` covers every weight.
    """
    if torch.cuda.is_available():
        return
    from vllm.model_executor.layers.linear import LinearBase

    LinearBase._cpu_skip_gemm_dispatch = True  # type: ignore[attr-defined]  # vLLM's CPU flag, set on the class


def _import_vllm() -> None:
    """Import vLLM (CPU: without scikit-learn and SciPy). vLLM imports Transformers' model
    registry, which imports scikit-learn (assisted generation) and SciPy (object-detection
    losses) because they are installed: about 2 of the 12 CPU-seconds vLLM's import takes, in the
    rollout worker, whose start-up is the job's longest, for code an engine never runs. Only where
    Transformers is not imported yet (it caches what is installed, and would then import them
    unguarded), and not on a GPU node (not measured there)."""
    from rlsvc.imports import as_if_missing

    hide = "transformers" not in sys.modules and not torch.cuda.is_available()
    with as_if_missing("sklearn", "scipy") if hide else nullcontext():
        import vllm  # noqa: F401
        import vllm.model_executor.layers.linear  # noqa: F401  # what imports the registry


def _pack_linears(model: torch.nn.Module) -> None:
    """CPU only: give each unquantized linear layer vLLM's own packed GEMM, built from its
    current weight, which stays in place. Plain `F.linear` on the parameters decoded 1.7x slower
    (28M-parameter model, batch 64: 0.086 s against 0.049 s per step)."""
    if torch.cuda.is_available():
        return
    from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    for module in model.modules():
        if isinstance(module, LinearBase) and isinstance(getattr(module, "quant_method", None), UnquantizedLinearMethod):
            dispatch_cpu_unquantized_gemm(module, remove_weight=False)


def _rpc_pack_linears(worker: Any) -> None:
    _pack_linears(worker.model_runner.get_model())


def _default_block_size() -> int | None:
    """32 on CPU, the smallest block vLLM's CPU attention takes (its default is 128); None (vLLM
    chooses) on GPU. Requests share prefix-cache blocks only when whole, even within one batch:
    with 32-token blocks a batch of 8 groups x 8 samples of one 128-token prompt each computed
    its prompts in 1.4 s against 4.4 s with 128-token blocks (every prompt computed 8 times),
    and decoding was no slower (28M-parameter model, benchmarks/rollout_representative.py)."""
    return None if torch.cuda.is_available() else 32


def _checkpoint_keys(model_dir: str) -> set[str]:
    """Tensor names in the checkpoint's safetensors files (headers only, no tensor data)."""
    from safetensors import safe_open

    keys: set[str] = set()
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            keys.update(f.keys())
    return keys


def _rpc_load_in_place(worker: Any, items: Iterable[tuple[str, torch.Tensor]]) -> int:
    """Runs on the vLLM worker: copy checkpoint-format tensors into the live parameters.

    The model's own `load_weights` does the name mapping and the q/k/v and gate/up packing,
    writing each tensor into its slice of the existing parameter; nothing is re-allocated, and
    `items` is consumed lazily, so a streaming transport overlaps transfer and load.
    """
    with torch.no_grad():
        return len(worker.model_runner.get_model().load_weights(iter(items)))


def _rpc_after_load(worker: Any) -> None:
    """Runs on the vLLM worker: vLLM's own post-load step (re-packs what still needs packing,
    e.g. the LM head on CPU), exactly as after the engine's first load."""
    from vllm.model_executor.model_loader.utils import process_weights_after_loading

    runner = worker.model_runner
    process_weights_after_loading(runner.get_model(), runner.model_config, runner.device)
    _pack_linears(runner.get_model())  # the packed kernels hold copies: rebuild them


def _rpc_share_parameters(worker: Any, path: str, create: bool) -> torch.Tensor:
    from rlsvc.rollout.shared_weights import share_parameters

    return share_parameters(worker.model_runner.get_model(), path, create)


def _rpc_copy_plan(worker: Any, flat: torch.Tensor, specs: list) -> Any:
    from rlsvc.rollout.shared_weights import copy_plan

    return copy_plan(worker.model_runner.get_model(), flat, specs)


def _rpc_num_parameters(worker: Any) -> int:
    return sum(p.numel() for p in worker.model_runner.get_model().parameters())


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


VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The `max_lora_rank` values vLLM 0.32 accepts (vllm/config/lora.py)."""


def vllm_lora_rank(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds adapters of `rank`."""
    for r in VLLM_LORA_RANKS:
        if r >= rank:
            return r
    raise ValueError(f"model.lora.rank: {rank} is above the largest rank vLLM serves ({VLLM_LORA_RANKS[-1]})")


class AdapterVersions:
    """The policy versions an engine holds as LoRA adapters: the newest `keep` (the run's
    `buffer.max_staleness + 1`, so an episode finishes under the version it started with), each
    with its vLLM `LoRARequest` (vLLM's id: version + 1, ids must be positive)."""

    def __init__(self, keep: int) -> None:
        if keep < 1:
            raise ValueError(f"keep {keep}: at least one adapter version must stay loaded")
        self.keep = keep
        self.loaded: dict[int, Any] = {}  # version -> LoRARequest

    def add(self, version: int, request: Any) -> list[int]:
        """Hold `request` as `version`; returns the versions that fell out of the window."""
        if self.loaded and version <= max(self.loaded):
            raise ValueError(f"adapter version {version} is not newer than the loaded {max(self.loaded)}")
        self.loaded[version] = request
        old = sorted(self.loaded)[: -self.keep]
        for v in old:
            del self.loaded[v]
        return old

    def drop_from(self, version: int) -> list[int]:
        """Forget `version` and every newer one (a job rewound to a checkpoint); returns them."""
        gone = [v for v in self.loaded if v >= version]
        for v in gone:
            del self.loaded[v]
        return gone

    def request(self, version: int | None) -> Any:
        """The request to sample `version` (None: the newest; none loaded yet: None, the base)."""
        if version is None:
            return self.loaded[max(self.loaded)] if self.loaded else None
        if version not in self.loaded:
            raise KeyError(f"adapter version {version} is not loaded (loaded: {sorted(self.loaded)})")
        return self.loaded[version]


class VLLMEngine:
    """One in-process vLLM engine serving a policy checkpoint (HF format directory)."""

    def __init__(
        self,
        model_dir: str,
        *,
        seed: int = 0,
        max_model_len: int = 32,
        gpu_memory_utilization: float = 0.3,
        kv_cache_gb: float = 1.0,
        block_size: int | None = None,
        enforce_eager: bool = True,
        dtype: str = "float32",
        max_num_seqs: int = 1024,
        tensor_parallel_size: int = 1,
        lora_rank: int | None = None,
        lora_versions: int = 1,
    ) -> None:
        """`lora_rank`: serve LoRA adapters of up to this rank on the checkpoint (the base), the
        last `lora_versions` policy versions registered at once (`load_adapter`)."""
        _configure_vllm_env()
        _import_vllm()
        _keep_linear_weights_as_parameters()
        if enforce_eager and not torch.cuda.is_available():
            # Even an eager engine compiles one sampler helper (the sampled tokens' ranks) with
            # Inductor at its first request: a C++ build, 1-2.5 s of every CPU engine's start-up.
            # This process (a rollout worker's) compiles nothing else.
            torch.compiler.set_stance("force_eager")
        from vllm import LLM

        self.model_dir = model_dir
        # -1: the checkpoint the engine started from; published versions count from 0
        self.version = -1
        self._pending: Manifest | None = None
        self._digest: Digest | None = None
        self._load_s = 0.0
        self._direct = False  # the pending update is written into shared weights by the trainer
        self._shared: tuple[torch.Tensor, Any] | None = None  # (shared weight file, copy plan)
        self._adapter_tensors: dict[str, torch.Tensor] = {}  # a pending adapter version's tensors
        self._adapter_root: Path | None = None  # this engine's adapter folders (tmpfs), made on first use
        # vLLM's reload only *logs* weights it did not receive; an RL step must not silently
        # keep stale tensors, so updates are checked against the checkpoint's names up front.
        self._expected_keys = _checkpoint_keys(model_dir)
        block = block_size or _default_block_size()
        cpu_only: dict[str, Any] = {}  # engine settings on CPU; on a GPU the KV cache is what `gpu_memory_utilization` leaves
        if block is not None and not torch.cuda.is_available():
            cpu_only["kv_cache_memory_bytes"] = kv_cache_bytes(
                model_dir, max_num_seqs, max_model_len, block, engine_dtype(dtype), kv_cache_gb
            )
        self.adapters = AdapterVersions(lora_versions) if lora_rank is not None else None
        if lora_rank is not None:
            cpu_only.update(enable_lora=True, max_lora_rank=vllm_lora_rank(lora_rank), max_loras=lora_versions, max_cpu_loras=lora_versions)
        if not torch.cuda.is_available():  # vLLM's C++ RMSNorm kernels (rlsvc/rollout/cpu_norms.py)
            cpu_norms.register()
            cpu_only["ir_op_priority"] = cpu_norms.IR_OP_PRIORITY
        self._llm: LLM | None = LLM(
            model=model_dir,
            tokenizer=model_dir,
            seed=seed,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager,
            dtype=cast(Any, engine_dtype(dtype)),  # a config string vLLM checks itself
            tensor_parallel_size=tensor_parallel_size,
            # "uni" keeps the single worker in this process (with multiprocessing off above); a
            # tensor-parallel engine needs one worker process per GPU of this actor.
            distributed_executor_backend="uni" if tensor_parallel_size == 1 else "mp",
            logprobs_mode=LOGPROBS_MODE,
            # one scheduler step for a whole rollout batch (vLLM's default is 256 sequences)
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max(max_num_seqs * max_model_len, 4096),
            block_size=block,
            **cpu_only,
        )
        self.llm.collective_rpc(_rpc_pack_linears)
        # vLLM's first request pays one-time set-up (samplers, output processing) whatever
        # the batch: pay it here, while the job is starting, rather than in the first rollout.
        self.generate([[0]], max_tokens=1, seed=0)

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
        max_tokens: int | Sequence[int] = 1,
        min_tokens: int = 0,
        allowed_token_ids: list[int] | None = None,
        seed: int | None = None,
        seeds: list[int] | None = None,
        adapter_version: int | Sequence[int] | None = None,
    ) -> list[dict]:
        """Sample a continuation for every prompt in one batched call.

        Returns, per prompt, `{"token_ids", "logprobs", "text"}` where `logprobs[i]` is the
        log-probability of `token_ids[i]` under the distribution it was sampled from
        (mask to `allowed_token_ids`, then `/ temperature`, then top-p). With `seed`, prompt
        `i` uses seed `seed + i`: one shared seed would give every prompt of a GRPO group the
        same noise and hence the same sample. `seeds` gives each prompt its own seed instead.
        `max_tokens` may be one budget per prompt (each session's room left in its context);
        `min_tokens` is then capped at each prompt's budget. An engine serving LoRA samples from
        the adapter of `adapter_version` (default: the newest loaded; none loaded: the base), or
        prompt i from the adapter of `adapter_version[i]` (each episode its own version's).
        """
        if self._pending is not None:
            raise RuntimeError(f"generate() during an unfinished weight update to version {self._pending.version}")
        if seeds is not None and len(seeds) != len(prompt_token_ids):
            raise ValueError(f"{len(seeds)} seeds for {len(prompt_token_ids)} prompts")
        budgets = [max_tokens] * len(prompt_token_ids) if isinstance(max_tokens, int) else list(max_tokens)
        if len(budgets) != len(prompt_token_ids):
            raise ValueError(f"{len(budgets)} max_tokens for {len(prompt_token_ids)} prompts")
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=list(ids)) for ids in prompt_token_ids]
        params = [
            SamplingParams(
                temperature=temperature,
                top_p=top_p,
                max_tokens=budgets[i],
                min_tokens=min(min_tokens, budgets[i]),
                allowed_token_ids=allowed_token_ids,
                seed=seeds[i] if seeds is not None else None if seed is None else seed + i,
                logprobs=0,  # 0 = only the sampled token's logprob
                # vLLM would detokenize every token as it is sampled (and every logprob's token);
                # the loop reads only whole completions, decoded once below: 15% more tokens/s
                # at batch 256 on CPU (benchmarks/rollout_throughput.py)
                detokenize=False,
                # the sampled tokens' logprobs as one flat list per completion (vLLM's
                # FlatLogprobs) instead of a dict of Logprob objects per token
                flat_logprobs=True,
                # vLLM deep-copies every request's params (about 15% of a batch-512, 1-token
                # generate on CPU); these are built here per call and never changed afterwards
                skip_clone=True,
            )
            for i in range(len(prompts))
        ]
        lora: Any = None
        if self.adapters is not None:
            if isinstance(adapter_version, Sequence):
                if len(adapter_version) != len(prompts):
                    raise ValueError(f"{len(adapter_version)} adapter versions for {len(prompts)} prompts")
                lora = [self.adapters.request(v) for v in adapter_version]
            else:
                lora = self.adapters.request(adapter_version)
        outputs = self.llm.generate(prompts, params, use_tqdm=False, lora_request=lora)
        completions = [out.outputs[0] for out in outputs]
        texts = cast(Any, self.llm.get_tokenizer()).batch_decode(  # vLLM types it as its narrow TokenizerLike; it is an HF tokenizer
            [c.token_ids for c in completions], skip_special_tokens=True
        )
        return [self._to_result(c, text) for c, text in zip(completions, texts, strict=True)]

    def load_adapter(self, folder: str, version: int) -> dict[str, float]:
        """Register the PEFT adapter folder as policy `version` (vLLM 0.32 reads adapters only
        from a path: a tmpfs folder keeps it off the disk) and unregister the versions that fall
        out of the window; later `generate` calls sample from it."""
        if self.adapters is None:
            raise RuntimeError("load_adapter: this engine was started without LoRA (lora_rank)")
        from vllm.lora.request import LoRARequest

        t0 = time.perf_counter()
        request = LoRARequest(f"policy-v{version}", version + 1, folder)
        engine = self.llm.llm_engine
        # out of the window first: a full vLLM cache would evict its least recently used
        # adapter itself, which may be one an in-flight episode still samples from
        for old in self.adapters.add(version, request):
            engine.remove_lora(old + 1)
            self._remove_adapter_folder(old)
        engine.add_lora(request)
        self.version = version
        return {"time/adapter_load_s": time.perf_counter() - t0}

    def loaded_adapters(self) -> list[int]:
        """Policy versions whose adapters the engine holds now (vLLM's own list), oldest first."""
        ids = self.llm.llm_engine.list_loras()
        return sorted(i - 1 for i in ids)

    @staticmethod
    def _to_result(completion: Any, text: str) -> dict:
        token_ids = list(completion.token_ids)
        flat = completion.logprobs  # logprobs=0: exactly the sampled token at every position
        if len(flat.logprobs) != len(token_ids) or list(flat.token_ids) != token_ids:
            raise RuntimeError(f"vLLM returned {len(flat.logprobs)} logprobs for {len(token_ids)} sampled tokens")
        return {"token_ids": token_ids, "logprobs": list(flat.logprobs), "text": text}

    # ---- weight updates: begin (manifest) -> load (buckets, streamed) -> finish --------------

    def share_weights(self, path: str, create: bool) -> tuple[int, Any]:
        """Move the live weights into the shared file at `path` (rlsvc/rollout/shared_weights.py);
        returns its size and the copy plan a trainer needs to write into it."""
        from rlsvc.rollout.shared_weights import checkpoint_specs

        (flat,) = self.llm.collective_rpc(_rpc_share_parameters, args=(path, create))
        (plan,) = self.llm.collective_rpc(_rpc_copy_plan, args=(flat, checkpoint_specs(self.model_dir)))
        self._shared = (flat, plan)
        return flat.numel(), plan

    def rewind(self, version: int) -> None:
        """The job restarted from a checkpoint at `version`: the next update brings that
        version, which may be older than what the engine holds. Accept it (and nothing older)."""
        self.version = min(self.version, version - 1)
        if self.adapters is not None:  # the adapters of the discarded versions go too
            for v in self.adapters.drop_from(version):
                self.llm.llm_engine.remove_lora(v + 1)
                self._remove_adapter_folder(v)

    def begin_update(self, manifest: Manifest, direct: bool = False) -> None:
        """Check a new version before any live weight changes: it must be newer than what the
        engine holds (versions only move forward; a worker that missed some jumps straight to the
        newest) and it must carry every tensor of the checkpoint (vLLM only *logs* missing ones)."""
        if manifest.version <= self.version:
            raise ValueError(f"weight update to version {manifest.version} refused: engine already holds version {self.version}")
        if manifest.adapter_config is not None or self.adapters is not None:
            self._check_adapter(manifest)
            if direct:
                raise ValueError(f"weight update to version {manifest.version}: an adapter is registered, not written into shared weights")
            self._pending, self._digest, self._load_s, self._direct = manifest, Digest(), 0.0, False
            self._adapter_tensors = {}
            return
        missing = self._expected_keys - {s.name for s in manifest.specs}
        if missing:
            raise ValueError(
                f"weight update to version {manifest.version} lacks {len(missing)} checkpoint tensors, e.g. {sorted(missing)[:3]}"
            )
        if direct and self._shared is None:
            raise RuntimeError("a direct weight update needs share_weights() first")
        self._pending, self._digest, self._load_s, self._direct = manifest, Digest(), 0.0, direct

    def load_tensors(self, items: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy one bucket (or a lazy stream of them) into the live weights, hashing as it goes."""
        if self._pending is None or self._digest is None:
            raise RuntimeError("load_tensors() outside begin_update()/finish_update()")
        digest = self._digest

        def hashed() -> Iterable[tuple[str, torch.Tensor]]:
            for name, tensor in items:
                digest.update(name, tensor)
                yield name, tensor

        t0 = time.perf_counter()
        if self._pending.adapter_config is not None:  # an adapter: kept until the version is whole
            self._adapter_tensors.update(hashed() if self._pending.digest else items)
        else:
            self.llm.collective_rpc(_rpc_load_in_place, args=(hashed() if self._pending.digest else items,))
        self._load_s += time.perf_counter() - t0

    def finish_update(self) -> dict[str, float | str]:
        """Post-load processing, prefix-cache reset, digest check; then the version is live."""
        manifest, digest = self._pending, self._digest
        if manifest is None or digest is None:
            raise RuntimeError("finish_update() without begin_update()")
        if manifest.adapter_config is not None:
            return self._finish_adapter(manifest, digest)
        t0 = time.perf_counter()
        self.llm.collective_rpc(_rpc_after_load)
        # Cached prefixes hold KV computed with the old weights; generate() is synchronous, so
        # no request is running and the reset can only fail if that assumption breaks.
        if not self.llm.reset_prefix_cache():
            raise RuntimeError(f"weight update to version {manifest.version}: prefix cache reset refused (requests in flight?)")
        if manifest.digest and self._direct:  # hash what the shared weights now hold
            from rlsvc.rollout.shared_weights import read_plan

            assert self._shared is not None, "direct weight loading maps the shared file at set-up"
            flat, plan = self._shared
            for name, tensor in read_plan(flat, plan, (s.name for s in manifest.specs)):
                digest.update(name, tensor)
        self._pending = self._digest = None
        received = digest.hexdigest() if manifest.digest else ""
        if manifest.digest and received != manifest.digest:
            # the live weights are now a mix: say so loudly rather than generate with them
            raise RuntimeError(f"weight update to version {manifest.version}: received digest {received} != published {manifest.digest}")
        self.version = manifest.version
        return {"load_s": self._load_s + time.perf_counter() - t0, "digest": received}

    # ---- LoRA: a version is an adapter folder (tmpfs), registered beside the newest others ------

    def _check_adapter(self, manifest: Manifest) -> None:
        """An engine serving LoRA takes adapter versions only, and an adapter only such an engine."""
        if self.adapters is None:
            raise ValueError(f"weight update to version {manifest.version} is a LoRA adapter; this engine was started without LoRA")
        if manifest.adapter_config is None:
            raise ValueError(f"weight update to version {manifest.version} is full weights; this engine serves LoRA adapters on its base")
        names = [s.name for s in manifest.specs]
        if not names or any(".lora_A." not in n and ".lora_B." not in n for n in names):
            raise ValueError(f"weight update to version {manifest.version}: not PEFT adapter tensors, e.g. {names[:2]}")

    def _finish_adapter(self, manifest: Manifest, digest: Digest) -> dict[str, float | str]:
        """Check the received adapter's digest, write its PEFT folder and register it."""
        from rlsvc.trainer.lora import write_peft_folder

        tensors, self._adapter_tensors = self._adapter_tensors, {}
        self._pending = self._digest = None
        t0 = time.perf_counter()
        received = self._check_digest(manifest, digest)
        assert manifest.adapter_config is not None, "an adapter version carries its config"
        folder = write_peft_folder(self._adapter_folder(manifest.version), tensors, manifest.adapter_config)
        self.load_adapter(str(folder), manifest.version)
        return {"load_s": self._load_s + time.perf_counter() - t0, "digest": received}

    def load_adapter_version(self, folder: str, manifest: Manifest) -> dict[str, float | str]:
        """Register the PEFT folder another process wrote (the shared-memory transport) as
        `manifest.version`, after checking its tensors against the manifest's digest."""
        from safetensors.torch import load_file

        t0 = time.perf_counter()
        self.begin_update(manifest)
        self._pending = self._digest = None
        tensors = load_file(str(Path(folder) / "adapter_model.safetensors"))
        digest = Digest()
        if manifest.digest:
            for s in manifest.specs:
                digest.update(s.name, tensors[s.name])
        received = self._check_digest(manifest, digest)
        self.load_adapter(folder, manifest.version)
        return {"load_s": time.perf_counter() - t0, "digest": received}

    @staticmethod
    def _check_digest(manifest: Manifest, digest: Digest) -> str:
        received = digest.hexdigest() if manifest.digest else ""
        if manifest.digest and received != manifest.digest:
            raise RuntimeError(f"adapter update to version {manifest.version}: received digest {received} != published {manifest.digest}")
        return received

    def _adapter_folder(self, version: int) -> Path:
        if self._adapter_root is None:
            import tempfile

            from rlsvc.weight_sync.shared_memory import SHM_DIR

            self._adapter_root = Path(tempfile.mkdtemp(prefix="rlsvc-adapters-", dir=SHM_DIR))
        return self._adapter_root / f"v{version:010d}"

    def _remove_adapter_folder(self, version: int) -> None:
        """A version's folder this engine wrote (one another process wrote is that one's)."""
        if self._adapter_root is not None:
            import shutil

            shutil.rmtree(self._adapter_root / f"v{version:010d}", ignore_errors=True)

    def update_weights(self, hf_state_dict: dict[str, torch.Tensor], version: int, verify: bool = True) -> dict[str, float | str]:
        """One-shot update from a full HF-format state dict (tests, the local transport)."""
        manifest = build_manifest(version, hf_state_dict, bucket_bytes=1 << 62)
        if verify:
            manifest.digest = digest_tensors((s.name, hf_state_dict[s.name]) for s in manifest.specs)
        self.begin_update(manifest)
        self.load_tensors((s.name, hf_state_dict[s.name]) for s in manifest.specs)
        return self.finish_update()

    def num_parameters(self) -> int:
        """Elements in the live parameters (every weight, thanks to the CPU setting above)."""
        (n,) = self.llm.collective_rpc(_rpc_num_parameters)
        return n

    def weights_fingerprint(self) -> str:
        """sha256 of the engine's live parameters (the single worker's answer)."""
        (digest,) = self.llm.collective_rpc(_rpc_fingerprint)
        return digest

    def close(self) -> None:
        """Shut the engine core down and release its memory; safe to call twice."""
        if self._llm is None:
            return
        llm, self._llm = self._llm, None
        if self._adapter_root is not None:
            import shutil

            shutil.rmtree(self._adapter_root, ignore_errors=True)
        # InprocClient.shutdown: executor/worker teardown, KV cache freed, and the
        # torch.distributed group vLLM created in this process destroyed.
        llm.llm_engine.engine_core.shutdown()
