"""vLLM's own C++ RMSNorm kernels for its CPU engine, which runs eagerly here.

vLLM routes RMSNorm through its IR ops (`vllm.ir.ops.rms_norm`, `fused_add_rms_norm`), and on
CPU it picks their PyTorch-native implementation: a float32 cast, a square, a mean, a rsqrt and
two products, one kernel each, which torch.compile would fuse. An eager engine (the rollout
workers compile nothing, rlsvc/rollout/vllm_engine.py) runs them as they are: on the
28M-parameter model of benchmarks/rollout_representative.py, 35-45 us a norm against 4-5 us for
vLLM's C++ kernels (`torch.ops._C.rms_norm`, `fused_add_rms_norm`), which its CPU build ships
but registers for GPUs only. Qwen3 runs four norms a layer, two of them per head on q and k.

`register` adds those kernels as an IR provider (`PROVIDER`) that `IR_OP_PRIORITY` puts first,
with the native implementation behind it for what they do not take (no weight, a variance size,
mixed dtypes). The C++ kernels read their input as packed rows, so a strided input (Qwen3's q
and k are views into the fused qkv output) is made contiguous first; an in-place fused add needs
both operands contiguous, or falls back to the native one.
"""

from __future__ import annotations

import torch

PROVIDER = "rlsvc_cpu_c"
IR_OP_PRIORITY = {"rms_norm": [PROVIDER, "native"], "fused_add_rms_norm": [PROVIDER, "native"]}
_DTYPES = (torch.float32, torch.bfloat16)


def _takes(x: torch.Tensor, weight: torch.Tensor | None, variance_size: int | None) -> bool:
    return variance_size is None and weight is not None and weight.dtype == x.dtype and x.dtype in _DTYPES


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None) -> torch.Tensor:
    rows = x.contiguous().view(-1, x.shape[-1])
    out = torch.empty_like(rows)
    torch.ops._C.rms_norm(out, rows, weight, epsilon)
    return out.view(x.shape)


def fused_add_rms_norm(
    x: torch.Tensor, x_residual: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """In place, as vLLM's GPU provider: `x_residual` becomes x + x_residual, `x` its norm."""
    torch.ops._C.fused_add_rms_norm(x.view(-1, x.shape[-1]), x_residual.view(-1, x.shape[-1]), weight, epsilon)
    return x, x_residual


def register() -> None:
    """Make `PROVIDER` known to vLLM's IR ops (once per process, before an engine is built)."""
    import vllm._custom_ops  # noqa: F401  # loads vLLM's C++ ops (torch.ops._C)
    from vllm import ir

    cpu = not torch.cuda.is_available() and hasattr(torch.ops._C, "rms_norm")
    if PROVIDER not in ir.ops.rms_norm.impls:
        ir.ops.rms_norm.register_impl(
            PROVIDER, supported=cpu, supports_args=lambda x, weight, epsilon, variance_size=None: _takes(x, weight, variance_size)
        )(rms_norm)
    if PROVIDER not in ir.ops.fused_add_rms_norm.impls:
        ir.ops.fused_add_rms_norm.register_impl(
            PROVIDER,
            supported=cpu,
            supports_args=lambda x, x_residual, weight, epsilon, variance_size=None: (
                _takes(x, weight, variance_size) and x_residual.dtype == x.dtype and x.is_contiguous() and x_residual.is_contiguous()
            ),
            inplace=True,
        )(fused_add_rms_norm)
