"""rlsvc/rollout/cpu_norms.py: vLLM's C++ RMSNorm kernels, registered as an IR provider for the CPU
engine, give vLLM's native results, strided inputs (Qwen3's per-head q/k views) included, and
vLLM dispatches to them under the engine's priority."""

from __future__ import annotations

import pytest
import torch
from vllm import ir

from rlsvc.rollout import cpu_norms

cpu_norms.register()
NATIVE = ir.ops.rms_norm.impls["native"].impl_fn
NATIVE_ADD = ir.ops.fused_add_rms_norm.impls["native"].impl_fn
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_norm_is_vllms_native_one_on_rows_and_strided_per_head_views(dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    qkv = torch.randn(12, 3 * 256, generator=gen).to(dtype)
    rows = torch.randn(12, 256, generator=gen).to(dtype)
    per_head = qkv[:, :256].view(12, 4, 64)  # q of a fused qkv output, by head: not contiguous
    assert not per_head.is_contiguous()
    for x, width in ((rows, 256), (per_head, 64), (qkv[:, 256:512], 256)):
        weight = torch.randn(width, generator=gen).to(dtype)
        got = cpu_norms.rms_norm(x, weight, 1e-6)
        assert got.shape == x.shape and got.dtype == dtype
        torch.testing.assert_close(got, NATIVE(x, weight, 1e-6), atol=TOL[dtype], rtol=TOL[dtype])


def test_the_fused_add_works_in_place_as_the_native_one_returns() -> None:
    gen = torch.Generator().manual_seed(1)
    x, residual, weight = torch.randn(9, 128, generator=gen), torch.randn(9, 128, generator=gen), torch.randn(128, generator=gen)
    want_out, want_residual = NATIVE_ADD(x.clone(), residual.clone(), weight, 1e-6)
    got_out, got_residual = cpu_norms.fused_add_rms_norm(x, residual, weight, 1e-6)
    assert got_out is x and got_residual is residual  # in place, as vLLM's other inplace providers
    torch.testing.assert_close(got_residual, want_residual, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(got_out, want_out, atol=1e-5, rtol=1e-5)


def test_vllm_dispatches_to_the_kernels_and_keeps_native_for_what_they_do_not_take() -> None:
    x, weight = torch.randn(4, 64), torch.randn(64)
    with ir.ops.rms_norm.set_priority(cpu_norms.IR_OP_PRIORITY["rms_norm"]):
        assert ir.ops.rms_norm.dispatch(x, weight, 1e-6).provider == cpu_norms.PROVIDER
        assert ir.ops.rms_norm.dispatch(x, None, 1e-6).provider == "native"  # no weight
        assert ir.ops.rms_norm.dispatch(x, weight, 1e-6, 32).provider == "native"  # a variance size
        assert ir.ops.rms_norm.dispatch(x, weight.double(), 1e-6).provider == "native"  # mixed dtypes
    strided = torch.randn(4, 128)[:, :64]
    with ir.ops.fused_add_rms_norm.set_priority(cpu_norms.IR_OP_PRIORITY["fused_add_rms_norm"]):
        assert ir.ops.fused_add_rms_norm.dispatch(x, x.clone(), weight, 1e-6).provider == cpu_norms.PROVIDER
        assert ir.ops.fused_add_rms_norm.dispatch(strided, x.clone(), weight, 1e-6).provider == "native"
