"""The learner: a TorchTitan policy (the tiny Llama3 built from scratch, or a pretrained Hugging
Face checkpoint, rlsvc/models/spec.py), FSDP2-sharded across data-parallel ranks, with GRPO steps.

Plain classes (the Ray actor wrapper lives elsewhere). Every rank gets its own slice of the global
batch; all distributed calls (`train_step`, `sft_step`, `logprobs`, `hf_state_dict`,
`load_hf_state_dict`, `parameter_checksum`) are collectives and must be made on all ranks.

Sharding choice:
- world_size > 1: TorchTitan's own FSDP2 recipe, `apply_fsdp_to_decoder` (the data-parallel half
  of `parallelize_llama`; the rest of that function is TP/CP/AC/compile, all off here). We build
  the 1-D mesh ourselves instead of through `ParallelDims.build_mesh`, which picks its device type
  from a module global that is "cuda" on a machine without accelerators. TorchTitan disables
  FSDP's gradient division, and we force plain SUM reductions (gloo rejects PREMUL_SUM), so
  gradients are SUMMED over ranks. Each rank's loss is its local sum divided by the GLOBAL
  token/sequence count, so the summed gradient is exactly the 1-rank gradient (no world_size factor).
- world_size == 1: the plain module. fully_shard would need a 1-rank process group (a port or
  file per actor, global state) to buy nothing on one rank.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn

from rlsvc.algo.grpo import LossSettings, Normalization, k3_kl, masked_reduce, token_logprobs
from rlsvc.algo.variants import configured_loss
from rlsvc.config import Config, TrainerConfig
from rlsvc.models.spec import ModelSpec, as_spec
from rlsvc.models.titan import ModelConfig, autocast, compute_dtype, forward, pick_device
from rlsvc.trainer.batch import TrainBatch
from rlsvc.trainer.lora import LoraSettings, is_lora_key
from rlsvc.trainer.lr_schedule import LRSchedule

METRIC_KEYS = ("loss", "kl", "entropy", "clip_frac", "ratio_mean", "tis_weight", "mismatch_kl", "mismatch_sum", "tokens")


REFERENCE_ADAPTERS = "lora_reference"
"""A checkpoint's entry for LoRA's frozen reference adapters (`freeze_reference_adapters`)."""


def _to_local(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def _to_full(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def apply_fsdp(model: nn.Module, device: torch.device, world_size: int, param_dtype: torch.dtype = torch.float32) -> nn.Module:
    """Shard with TorchTitan's FSDP2 recipe (embeddings, [norm, head], each block, root); compute
    in `param_dtype`, reduce gradients in float32."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule
    from torchtitan.distributed.fsdp import apply_fsdp_to_decoder

    mesh = init_device_mesh(device.type, (world_size,), mesh_dim_names=("fsdp",))
    apply_fsdp_to_decoder(model, mesh, param_dtype=param_dtype, reduce_dtype=torch.float32, pp_enabled=False)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            # gloo has no PREMUL_SUM; with division disabled a plain SUM is what we want anyway.
            module.set_force_sum_reduction_for_comms(True)
    return model


def _response_only(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Zero outside the response. With `allowed_token_ids`, prompt tokens get -inf logprobs, and
    0 * inf in the masked sums (KL, mismatch) or their gradients would turn into NaN."""
    return torch.where(mask > 0, values, torch.zeros_like(values))


MICRO_BATCH_TOKENS = 16384
"""Default padded tokens per forward pass (`trainer.micro_batch_tokens`)."""
FUSED_ADAMW_DEVICES = ("cpu", "cuda")
"""Devices whose parameters get `torch.optim.AdamW(fused=True)` (PyTorch has it for mps and xpu too)."""


class _PolicyBase:
    """Shared by the trainer and the frozen reference: device, model, logprobs."""

    spec: ModelSpec
    device: torch.device
    dtype: torch.dtype = torch.float32
    model: nn.Module
    sharded: bool = False
    micro_batch_tokens: int = MICRO_BATCH_TOKENS
    share_prefixes: bool = True  # trainer.share_prefixes
    temperature: float = 1.0  # logprobs under logits / this: the rollout's (LossSettings.temperature)

    def _max_over_ranks(self, value: float) -> float:
        return value

    def _micro_batches(self, lengths: torch.Tensor) -> list[tuple[torch.Tensor, int, bool]]:
        """(row indices, width, filler) of each forward pass. A batch within `micro_batch_tokens` is one
        pass as it is. A larger one is sorted by row length and split into equal parts, each
        trimmed to its own longest row: multi-turn batches are mostly short rows padded to a few
        long ones, and the padding is most of the work. Every rank makes as many passes (FSDP's
        collectives run per forward); a rank with fewer rows than passes runs a `filler` pass on
        one repeated row, whose result is not used."""
        n, width = len(lengths), int(lengths.max()) if len(lengths) else 0
        parts = int(self._max_over_ranks(max(1, math.ceil(n * width / self.micro_batch_tokens))))
        if parts == 1:
            return [(torch.arange(n), width, False)]
        order = torch.argsort(lengths, stable=True)
        chunks = [(c, False) if len(c) else (order[:1], True) for c in torch.tensor_split(order, parts)]
        return [(c, max(int(lengths[c].max()), 1), filler) for c, filler in chunks]

    def _forward(self, ids: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [N, T, V]; with `lengths`, rows sharing a prefix compute it once (packing)."""
        lengths = lengths if self.share_prefixes else None
        if self.sharded:  # FSDP's mixed-precision policy already computes in self.dtype
            return forward(self.model, ids, lengths)
        with autocast(self.device, self.dtype):
            return forward(self.model, ids, lengths)

    @torch.no_grad()
    def logprobs(
        self, input_ids: torch.Tensor, allowed_token_ids: list[int] | None = None, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        """log p(token t | tokens < t) as [N, T] on CPU (position 0 is 0). With `lengths` (each
        row's tokens before its right padding) positions past a row's length are 0."""
        self.model.eval()
        n, width = input_ids.shape
        lengths = torch.full((n,), width) if lengths is None else lengths.cpu()
        out = torch.zeros((n, width), dtype=torch.float32)
        for rows, w, filler in self._micro_batches(lengths):
            ids = input_ids[rows, :w].to(self.device)
            lp, _ = token_logprobs(self._forward(ids, lengths[rows]), ids, allowed_token_ids, self.temperature)
            if not filler:
                out[rows, :w] = lp.float().cpu()
        return torch.where(torch.arange(width) < lengths[:, None], out, torch.zeros_like(out))


class TitanReference(_PolicyBase):
    """Frozen, unsharded copy of the policy for the KL term: only `logprobs` and weight loading."""

    def __init__(
        self,
        model: ModelSpec | ModelConfig,
        *,
        hf_state_dict: dict[str, torch.Tensor] | None = None,
        seed: int = 0,
        device: str = "auto",
        param_dtype: str = "auto",
        micro_batch_tokens: int = MICRO_BATCH_TOKENS,
        share_prefixes: bool = True,
        temperature: float = 1.0,
    ) -> None:
        self.spec = as_spec(model)
        self.micro_batch_tokens, self.share_prefixes = micro_batch_tokens, share_prefixes
        self.temperature = temperature  # the rollout's: the KL term compares like with like
        self.device = pick_device(device)
        self.dtype = compute_dtype(param_dtype, self.device)
        self.model = self.spec.build(seed, self.device).requires_grad_(False).eval()
        if hf_state_dict is not None:
            self.load_hf_state_dict(hf_state_dict)

    def load_hf_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(self.spec.from_hf(sd))

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights in the checkpoint's names, contiguous CPU copies (a training checkpoint's)."""
        return self.spec.to_hf(self.model.state_dict(), copy=True)


class TitanTrainer(_PolicyBase):
    """One data-parallel rank of the GRPO learner (AdamW, grad clipping, one step per call)."""

    def __init__(
        self,
        model: ModelSpec | ModelConfig,
        *,
        lr: float,
        weight_decay: float = 0.0,
        max_grad_norm: float = 1.0,
        betas: tuple[float, float] = (0.9, 0.999),
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        dist_init_method: str | None = None,
        dist_store: dist.Store | None = None,
        init_hf_state_dict: dict[str, torch.Tensor] | None = None,
        device: str = "auto",
        param_dtype: str = "auto",
        micro_batch_tokens: int = MICRO_BATCH_TOKENS,
        share_prefixes: bool = True,
        loss: LossSettings | None = None,
        lr_schedule: LRSchedule | None = None,
        lora: LoraSettings | None = None,
    ) -> None:
        self.spec = as_spec(model)
        self.lora = lora
        """LoRA adapters on a frozen base (rlsvc/trainer/lora.py); None: the whole model trains."""
        self.reference_adapters: dict[str, torch.Tensor] | None = None
        """With LoRA, the adapters the reference holds (`freeze_reference_adapters`); None: the
        reference is the base, adapters off."""
        self.lr, self.lr_schedule = lr, lr_schedule or LRSchedule()
        self.micro_batch_tokens, self.share_prefixes = micro_batch_tokens, share_prefixes
        self.loss = loss if loss is not None else LossSettings()
        self.temperature = self.loss.temperature
        """The policy loss's settings, for every step (`TrainerSpec.loss`)."""
        self.rank, self.world_size = rank, world_size
        self.max_grad_norm = max_grad_norm
        self.device = pick_device(device)
        self.dtype = compute_dtype(param_dtype, self.device)
        self._owns_group = False
        if world_size > 1:
            self._init_process_group(dist_init_method, dist_store)
        self.sharded = world_size > 1
        shard = (lambda m: apply_fsdp(m, self.device, world_size, self.dtype)) if self.sharded else None
        self.model = self.spec.build(seed, self.device, shard) if lora is None else self._build_with_adapters(seed, lora, shard)
        if init_hf_state_dict is not None:
            self.load_hf_state_dict(init_hf_state_dict)
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        # PyTorch's fused AdamW (one vectorised, multi-threaded kernel over each parameter) where
        # the device has it: on CPU its default is a loop of per-tensor ops, about 3.5x slower on
        # the 28M-parameter model of benchmarks/vs_trl_representative.py (0.069 s a step vs
        # 0.018, 2 threads). Transformers' Trainer (TRL's) defaults to the fused one as well.
        fused = self.device.type in FUSED_ADAMW_DEVICES
        self.optimizer = torch.optim.AdamW(trainable, lr=lr, betas=betas, weight_decay=weight_decay, fused=fused)

    def _build_with_adapters(self, seed: int, lora: LoraSettings, shard: Any) -> nn.Module:
        """The base model, frozen, with adapters added before FSDP2 shards it (the adapters then
        sit in their layer's FSDP unit). A pretrained base is read whole on each rank first: the
        spec's sharded load keys on the base's names only."""
        from rlsvc.trainer.lora import add_adapters

        model = add_adapters(self.spec.build(seed, self.device), lora, seed)
        return shard(model) if shard is not None else model

    def _init_process_group(self, init_method: str | None, store: dist.Store | None) -> None:
        if dist.is_initialized():
            if dist.get_world_size() != self.world_size:
                raise RuntimeError(f"a process group of size {dist.get_world_size()} exists; trainer wants {self.world_size}")
            return
        if self.device.type == "cuda" and self.device.index is not None:
            torch.cuda.set_device(self.device)
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        # a store (already listening, see rlsvc/rendezvous.py) or an init_method URL
        where = {"store": store} if store is not None else {"init_method": init_method}
        dist.init_process_group(backend, rank=self.rank, world_size=self.world_size, **where)
        self._owns_group = True

    # ---- collectives over the data-parallel ranks -------------------------------------------

    def _all_sum(self, values: torch.Tensor) -> torch.Tensor:
        """Sum a small float64 vector over ranks (one all-reduce for all the counters)."""
        if not self.sharded:
            return values.cpu()
        on_device = values.to(self.device)  # NCCL only reduces device tensors
        dist.all_reduce(on_device, op=dist.ReduceOp.SUM)
        return on_device.cpu()

    def _max_over_ranks(self, value: float) -> float:
        if not self.sharded:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)  # exact for counts too
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def _global_denominator(self, mask: torch.Tensor, normalization: Normalization) -> float:
        local = mask.sum() if normalization == "token" else torch.tensor(float(mask.shape[0]))
        total = self._all_sum(local.detach().to(torch.float64).reshape(1).clone())
        # A batch with no response tokens anywhere gives a zero loss, not a division by zero.
        return max(float(total.item()), 1.0)

    def optimizer_steps(self) -> int:
        """Optimiser steps applied so far: AdamW's own count, which a training checkpoint restores."""
        state = next(iter(self.optimizer.state.values()), None)
        return int(state["step"]) if state else 0

    def _step_optimizer(self) -> tuple[float, bool]:
        """Clip and apply the gradients; (grad norm, applied). A NaN or infinite norm (from a
        non-finite loss or gradient) is not applied: it would poison every weight and the
        optimiser's moments. The norm is global over the ranks, so every rank skips alike."""
        grad_norm = float(_to_full(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)).item())
        applied = math.isfinite(grad_norm)
        if applied:
            if self.lr_schedule.moves:
                for group in self.optimizer.param_groups:
                    group["lr"] = self.lr * self.lr_schedule.factor(self.optimizer_steps())
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm, applied

    # ---- training -----------------------------------------------------------------------------

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        """One GRPO optimiser step on this rank's slice of the global batch, with the loss
        settings of `self.loss`; metrics are global.

        `batch.old_logprobs` are vLLM's (the behaviour policy). With `tis_cap`, the ratio is
        clipped against `batch.prox_logprobs` (the trainer's before this step) and tokens are
        weighted by the truncated ratio prox / behaviour (see `policy_loss`)."""
        t0 = time.perf_counter()
        normalization = self.loss.normalization
        denominator = self._global_denominator(batch.loss_mask.to(torch.float32).to(self.device), normalization)
        # Dr. GRPO and GSPO divide by the global row count (one more all-reduce); grpo needs none
        row_count = denominator if self.loss.kind == "grpo" else self._global_denominator(batch.loss_mask, "sequence")
        lengths = batch.lengths.cpu()
        batch = replace(batch, lengths=lengths)
        self.model.train()
        local = torch.zeros(len(METRIC_KEYS), dtype=torch.float64)
        worst = 0.0  # the largest |trainer - vLLM| logprob of any sampled token on this rank
        for rows, w, filler in self._micro_batches(lengths):
            part = batch.rows(rows, w).to(self.device)
            if filler:  # keeps this rank's collectives in step with the others; adds nothing
                part.loss_mask = torch.zeros_like(part.loss_mask)
            sums, part_worst = self._accumulate(part, denominator, row_count)
            local, worst = local + sums, max(worst, part_worst)
        grad_norm, applied = self._step_optimizer()

        totals = dict(zip(METRIC_KEYS, self._all_sum(local).tolist(), strict=True))
        tokens = max(totals.pop("tokens"), 1.0)
        totals["logprob_mismatch"] = totals.pop("mismatch_sum") / tokens
        totals["logprob_mismatch_max"] = self._max_over_ranks(worst)
        totals["grad_norm"] = grad_norm
        totals["nonfinite_skipped"] = 0.0 if applied else 1.0
        totals["time/train_compute_s"] = time.perf_counter() - t0
        return totals

    def _accumulate(self, b: TrainBatch, denominator: float, row_count: float) -> tuple[torch.Tensor, float]:
        """Forward and backward of one micro-batch; gradients accumulate. Every sum is divided by
        the GLOBAL denominator (`row_count`: the global rows, for the losses that divide by them),
        so the micro-batches add up to the full batch's loss and metrics. Also returns the largest
        |trainer - vLLM| logprob of its sampled tokens (a mean would hide one drifting token)."""
        settings = self.loss
        ids, mask = b.input_ids, b.loss_mask.to(torch.float32)
        old = _response_only(b.old_logprobs.to(torch.float32), mask)
        behaviour = old
        if settings.tis_cap is not None:
            if b.prox_logprobs is None:
                raise ValueError("grpo.tis_cap needs the batch's prox_logprobs (the trainer's own before the step)")
            old = _response_only(b.prox_logprobs.to(torch.float32), mask)
        ref = _response_only(b.ref_logprobs.to(torch.float32), mask) if b.ref_logprobs is not None else None
        logprobs, entropy = token_logprobs(self._forward(ids, b.lengths), ids, settings.allowed_token_ids, settings.temperature)
        logprobs = _response_only(logprobs, mask)
        loss, stats = configured_loss(
            logprobs,
            old,
            b.advantages,
            mask,
            settings,
            denominator=denominator,
            rows=row_count,
            ref_logprobs=ref,
            behaviour_logprobs=behaviour,
        )
        loss.backward()
        worst = float(((logprobs.detach() - behaviour).abs() * mask).max()) if mask.numel() else 0.0
        return self._local_metrics(loss, stats, logprobs, entropy, behaviour, ref, mask, settings.normalization, denominator), worst

    def _local_metrics(
        self,
        loss: torch.Tensor,
        stats: dict[str, torch.Tensor],
        logprobs: torch.Tensor,
        entropy: torch.Tensor,
        old: torch.Tensor,
        ref: torch.Tensor | None,
        mask: torch.Tensor,
        normalization: Normalization,
        denominator: float,
    ) -> torch.Tensor:
        """Per-rank partial sums; every entry is already divided by the GLOBAL count, so summing
        over ranks gives the global value."""
        lp = logprobs.detach()
        kl = stats.get("kl")
        if kl is None and ref is not None:  # still report the KL when it is not in the loss
            kl = masked_reduce(k3_kl(lp, ref), mask, normalization, denominator)
        zero = torch.zeros((), device=mask.device)
        parts = [
            loss.detach(),
            kl if kl is not None else zero,
            masked_reduce(entropy.detach(), mask, normalization, denominator),
            stats["clip_frac"],
            stats["ratio_mean"],
            stats.get("tis_weight", zero),
            # KL(vLLM || trainer) on the sampled tokens (k3): staleness plus numerical mismatch
            masked_reduce(k3_kl(old, lp), mask, normalization, denominator),
            ((lp - old).abs() * mask).sum(),
            mask.sum(),
        ]
        return torch.stack([p.to(torch.float64).reshape(()) for p in parts]).cpu()

    def sft_step(self, input_ids: torch.Tensor, loss_mask: torch.Tensor) -> float:
        """One step of cross-entropy on the masked tokens (token-mean over the global batch)."""
        ids, mask = input_ids.to(self.device), loss_mask.to(self.device, torch.float32)
        denominator = self._global_denominator(mask, "token")
        self.model.train()
        logprobs, _ = token_logprobs(self._forward(ids), ids)
        loss = -(logprobs * mask).sum() / denominator
        loss.backward()
        self._step_optimizer()
        return float(self._all_sum(loss.detach().to(torch.float64).reshape(1).cpu()).item())

    # ---- weights ------------------------------------------------------------------------------

    def hf_state_dict(self, copy: bool = True, lazy_permute: bool = False) -> dict[str, torch.Tensor]:
        """Full weights in HF Llama names, contiguous CPU float32. With FSDP, rank 0 gets the dict
        and the other ranks an empty one (all ranks must call). `copy=False`: see
        `to_hf_state_dict` (on one rank, unpermuted tensors are the live parameters)."""
        if not self.sharded:
            return self.spec.to_hf(self._merged(self.model.state_dict()), copy=copy, lazy_permute=lazy_permute and not copy)
        # the gather already produces fresh CPU tensors, so no second copy is needed
        full = self._full_state_dict()
        return self.spec.to_hf(self._merged(full), copy=False, lazy_permute=lazy_permute) if self.rank == 0 else {}

    def _full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every weight, TorchTitan names, on CPU: on rank 0 under FSDP (a collective), else live."""
        if not self.sharded:
            return self.model.state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return cast(dict[str, torch.Tensor], full)

    def _merged(self, titan_sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """With LoRA, the weights the policy computes with (adapters folded into the base)."""
        from rlsvc.trainer.lora import merged

        return titan_sd if self.lora is None else merged(titan_sd, self.lora)

    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """The LoRA adapters, TorchTitan names (`layers.0.attention.wq.lora_a.weight`), CPU float32
        copies; under FSDP rank 0 gets them and the others an empty dict (all ranks must call)."""
        from rlsvc.trainer.lora import split

        if self.lora is None:
            raise ValueError("adapter_state_dict: this trainer has no LoRA adapters (model.lora.enabled is false)")
        adapters = split(self._full_state_dict())[1]
        if self.sharded and self.rank != 0:
            return {}
        return {k: v.detach().to("cpu", torch.float32, copy=True) for k, v in adapters.items()}

    def peft_adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """The adapters in PEFT's names and the base checkpoint's layout (rank 0; all ranks call)."""
        from rlsvc.trainer.lora import peft_adapter_state_dict

        adapters = self.adapter_state_dict()
        return peft_adapter_state_dict(self.spec, adapters) if adapters else {}

    def freeze_reference_adapters(self) -> None:
        """With LoRA, make the policy as it is now the reference: its adapters are copied and
        frozen (each rank its shards), and `reference_logprobs` runs the model with them. A job
        calls this after the warm start, so the KL term pulls toward the warm-started policy, as
        full fine-tuning's reference is, not toward the base the warm start left (docs/lora.md)."""
        from rlsvc.trainer.lora import snapshot_adapters

        if self.lora is None:
            raise ValueError("freeze_reference_adapters: this trainer has no LoRA adapters (model.lora.enabled is false)")
        self.reference_adapters = snapshot_adapters(self.model)

    @torch.no_grad()
    def reference_logprobs(
        self, input_ids: torch.Tensor, allowed_token_ids: list[int] | None = None, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        """With LoRA, the reference's logprobs from this model, so no reference copy is needed:
        with the frozen adapters of `freeze_reference_adapters` in place of the policy's, else
        with the adapters off (the base). A collective under FSDP, like `logprobs`."""
        from rlsvc.trainer.lora import adapters_disabled, adapters_set_to

        if self.lora is None:
            raise ValueError("reference_logprobs: without LoRA the reference is a model of its own (TitanReference)")
        frozen = self.reference_adapters
        with adapters_disabled(self.model) if frozen is None else adapters_set_to(self.model, frozen):
            return self.logprobs(input_ids, allowed_token_ids, lengths)

    def load_hf_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        """Load full HF-named weights; with FSDP every rank passes the same full dict."""
        titan_sd = self.spec.from_hf(sd)
        strict = self.lora is None  # with LoRA these are the base's weights; the adapters stay
        if not self.sharded:
            missing = self.model.load_state_dict(titan_sd, strict=strict).missing_keys
            if any(not is_lora_key(k) for k in missing):
                raise ValueError(f"load_hf_state_dict: weights missing: {[k for k in missing if not is_lora_key(k)][:3]}")
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(self.model, cast(Any, titan_sd), options=StateDictOptions(full_state_dict=True, strict=strict))

    def save_checkpoint(self, directory: str) -> None:
        """Model and optimiser (AdamW moments, step counts) as a sharded torch.distributed
        checkpoint: every rank writes its own shards into the same `directory`; all ranks call."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

        # LoRA's frozen reference adapters travel with the policy's (each rank its shards)
        frozen = {} if self.reference_adapters is None else {REFERENCE_ADAPTERS: dict(self.reference_adapters)}
        if not self.optimizer.state:  # no step taken yet: nothing to save, and asking for the
            # optimiser's state dict would initialise it with a fake step (AdamW's step count 1)
            dcp.save({"model": get_model_state_dict(self.model, options=self._checkpoint_options()), **frozen}, checkpoint_id=directory)
            return
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer, options=self._checkpoint_options())
        dcp.save({"model": model_sd, "optim": optim_sd, **frozen}, checkpoint_id=directory)

    def load_checkpoint(self, directory: str) -> None:
        """Restore what `save_checkpoint` wrote (same world size and model config); all ranks call."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict, set_model_state_dict, set_state_dict

        if "://" in directory:  # an object store (s3://...): fsspec, as dcp.load picks for a URI
            from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

            reader: Any = FsspecReader(directory)
        else:
            reader = dcp.FileSystemReader(directory)
        saved = reader.read_metadata().state_dict_metadata
        options = self._checkpoint_options()
        frozen = self._reference_adapters_to_load(saved)
        if not any(k.startswith("optim") for k in saved):  # saved before the first step
            state: dict[str, Any] = {"model": get_model_state_dict(self.model, options=options), **frozen}
            dcp.load(state, checkpoint_id=directory)
            set_model_state_dict(self.model, state["model"], options=options)
        else:
            model_sd, optim_sd = get_state_dict(self.model, self.optimizer, options=options)  # the layout to load into
            state = {"model": model_sd, "optim": optim_sd, **frozen}
            dcp.load(state, checkpoint_id=directory)
            set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"], options=options)
        self.reference_adapters = state.get(REFERENCE_ADAPTERS)

    def _reference_adapters_to_load(self, saved: Any) -> dict[str, Any]:
        """Where a checkpoint holds LoRA's frozen reference adapters: tensors of their layout for
        `dcp.load` to fill (the adapters' own, copied); else nothing."""
        from rlsvc.trainer.lora import snapshot_adapters

        if self.lora is None or not any(k.startswith(f"{REFERENCE_ADAPTERS}.") for k in saved):
            return {}
        return {REFERENCE_ADAPTERS: snapshot_adapters(self.model)}

    def _checkpoint_options(self) -> Any:
        """With LoRA a checkpoint holds the adapters and their optimiser state, not the frozen base
        (rebuilt from the spec on resume); `strict=False` lets the base's keys be absent."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(ignore_frozen_params=self.lora is not None, strict=self.lora is None)

    def parameter_checksum(self) -> float:
        """Sum of all parameter values plus their squares, in float64 (a cheap equality probe)."""
        local = torch.zeros(1, dtype=torch.float64)
        for p in self.model.parameters():
            x = _to_local(p.detach()).to("cpu", torch.float64)
            local += x.sum() + (x * x).sum()
        return float(self._all_sum(local).item())

    def state(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "sharded": self.sharded,
        }

    def close(self) -> None:
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
        self._owns_group = False


@dataclass(frozen=True)
class TrainerSpec:
    """What every trainer rank and the reference model are built from: the model (built from
    scratch or a pretrained checkpoint, rlsvc/models/spec.py), the config's `trainer` section as
    the config validated it, and the run's seed."""

    model: ModelSpec
    trainer: TrainerConfig
    seed: int
    loss: LossSettings = field(default_factory=LossSettings)
    """The policy loss's settings for every step (a job's: `from_config`); the default is the
    loss's own (clip 0.2, no KL term, on-policy), for specs that never train with GRPO."""
    lora: LoraSettings | None = None
    """LoRA adapters on a frozen base (`model.lora`); None: full fine-tuning."""

    @classmethod
    def from_config(cls, model: ModelSpec, cfg: Config, allowed_token_ids: Sequence[int] | None) -> TrainerSpec:
        """A job's spec: its `trainer` section, seed and `grpo` loss settings; `allowed_token_ids`:
        the tokens vLLM samples from under `rollout.constrained_actions` (None: all)."""
        steps = cfg.model.warm_start_steps + cfg.run.steps * cfg.trainer.minibatches
        loss = LossSettings.from_config(cfg.grpo, allowed_token_ids, cfg.rollout.max_tokens, cfg.rollout.temperature)
        return cls(model, whole_job_decay(cfg.trainer, steps), cfg.run.seed, loss, LoraSettings.from_config(cfg.model.lora))

    def build(
        self,
        *,
        rank: int = 0,
        world_size: int = 1,
        dist_store: dist.Store | None = None,
        init_hf_state_dict: dict[str, torch.Tensor] | None = None,
    ) -> TitanTrainer:
        t = self.trainer
        return TitanTrainer(
            self.model,
            lr=t.lr,
            weight_decay=t.weight_decay,
            max_grad_norm=t.max_grad_norm,
            seed=self.seed,
            param_dtype=t.param_dtype,
            rank=rank,
            world_size=world_size,
            dist_store=dist_store,
            init_hf_state_dict=init_hf_state_dict,
            micro_batch_tokens=t.micro_batch_tokens,
            share_prefixes=t.share_prefixes,
            loss=self.loss,
            lr_schedule=LRSchedule(t.lr_schedule, t.warmup_steps, t.decay_steps, t.min_lr_ratio),
            lora=self.lora,
        )

    def build_reference(self, hf_state_dict: dict[str, torch.Tensor] | None = None) -> TitanReference:
        """The frozen reference: the same model, dtype and forward passes as a trainer rank's,
        unsharded (whichever process holds it computes every row itself)."""
        t = self.trainer
        return TitanReference(
            self.model,
            hf_state_dict=hf_state_dict,
            seed=self.seed,
            param_dtype=t.param_dtype,
            micro_batch_tokens=t.micro_batch_tokens,
            share_prefixes=t.share_prefixes,
            temperature=self.loss.temperature,
        )


def whole_job_decay(trainer: TrainerConfig, steps: int) -> TrainerConfig:
    """`trainer` with `decay_steps` set to the job's optimiser steps where the config leaves it to
    the job (None) and a schedule decays."""
    if trainer.decay_steps is not None or trainer.lr_schedule == "constant":
        return trainer
    return trainer.model_copy(update={"decay_steps": max(steps, 1)})
