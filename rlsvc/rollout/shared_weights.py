"""Engine weights that live in one shared-memory file per node, written in place by the trainer.

Every byte of a weight update is then copied once: from the trainer's parameters straight into
the memory the engines compute with (the role CUDA IPC plays between colocated GPU processes).

- `share_parameters` (runs inside the vLLM worker): moves every live parameter of the engine into
  a file under /dev/shm (one region per parameter); the first engine on the node fills it, the
  others map the same file, so all engines on a node serve one copy of the weights.
- `copy_plan` (runs inside the vLLM worker): where each checkpoint tensor lands in that file.
  It runs the model's own `load_weights` on *probe* tensors (meta-device tensors of a subclass
  that intercepts `copy_`), so vLLM's name mapping and q/k/v, gate/up packing decide the layout,
  not code here. Each entry is (source view, destination view) in elements.
- `apply_plan` / `read_plan`: the trainer writes its tensors through the plan; a worker reads them
  back through it to hash what it now serves.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

ALIGN = 64
# (src storage offset, src size, src stride, dst byte offset, dst size, dst stride) per copy
CopyOp = tuple[int, tuple[int, ...], tuple[int, ...], int, tuple[int, ...], tuple[int, ...]]
Plan = dict[str, tuple[tuple[int, ...], torch.dtype, list[CopyOp]]]


def share_parameters(model: torch.nn.Module, path: str, create: bool) -> torch.Tensor:
    """Re-home every parameter in the file at `path` (filled from this model when `create`)."""
    params = sorted(model.named_parameters(), key=lambda kv: kv[0])
    offsets, total = [], 0
    for _, p in params:
        total = -(-total // ALIGN) * ALIGN
        offsets.append(total)
        total += p.numel() * p.element_size()
    flat = torch.from_file(path, shared=True, size=max(total, 1), dtype=torch.uint8)
    for (name, p), off in zip(params, offsets):
        view = flat[off : off + p.numel() * p.element_size()].view(p.dtype).view(p.shape)
        if create:
            view.copy_(p.data)
        elif not torch.equal(view, p.data):
            raise RuntimeError(f"shared weight file {path} does not hold this engine's {name}: engines must start from the same checkpoint")
        p.data = view
    return flat


class _Probe(torch.Tensor):
    """A meta tensor standing in for a checkpoint tensor: `dst.copy_(probe view)` is recorded,
    not executed."""

    ops: list[tuple[torch.Tensor, torch.Tensor]] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        if func is torch.Tensor.copy_ and len(args) >= 2 and isinstance(args[1], _Probe) and not isinstance(args[0], _Probe):
            _Probe.ops.append((args[0], args[1]))
            return args[0]
        return super().__torch_function__(func, types, args, kwargs or {})


def copy_plan(model: Any, flat: torch.Tensor, specs: Iterable[tuple[str, tuple[int, ...], torch.dtype]]) -> Plan:
    """For each checkpoint tensor: the copies vLLM's `load_weights` makes into the shared file.
    `model` is vLLM's model, whose `load_weights` is vLLM's own (not an `nn.Module` method)."""
    base, end = flat.data_ptr(), flat.data_ptr() + flat.numel()
    plan: Plan = {}
    current: list[str] = []

    def probes() -> Iterator[tuple[str, torch.Tensor]]:
        for name, shape, dtype in specs:
            current[:] = [name]
            plan[name] = (tuple(shape), dtype, [])
            _Probe.ops = []
            yield name, torch.empty(shape, dtype=dtype, device="meta").as_subclass(_Probe)
            _record(name)

    def _record(name: str) -> None:
        for dst, src in _Probe.ops:
            if not base <= dst.data_ptr() < end:
                raise RuntimeError(f"{name} is loaded into memory outside the shared weight file")
            plan[name][2].append(
                (int(src.storage_offset()), tuple(src.shape), src.stride(), dst.data_ptr() - base, tuple(dst.shape), dst.stride())
            )
        _Probe.ops = []

    with torch.no_grad():
        model.load_weights(probes())
    if current:  # the loader may stop pulling right after the last item
        _record(current[0])
    empty = [n for n, (_, _, ops) in plan.items() if not ops]
    if empty:
        raise RuntimeError(f"vLLM's load_weights copied nothing for {empty[:3]}")
    return plan


def _dst(flat: torch.Tensor, dtype: torch.dtype, op: CopyOp) -> torch.Tensor:
    _, _, _, off, size, stride = op
    item = torch.empty((), dtype=dtype).element_size()
    return flat.view(dtype).as_strided(size, stride, off // item)


def _src(tensor: torch.Tensor, op: CopyOp) -> torch.Tensor:
    offset, size, stride = op[0], op[1], op[2]
    flat = tensor.contiguous().view(-1)
    return flat.as_strided(size, stride, flat.storage_offset() + offset)


def apply_plan(flat: torch.Tensor, plan: Plan, tensors: dict[str, torch.Tensor]) -> None:
    """Write `tensors` (checkpoint names) into the shared file, exactly where vLLM would.

    A tensor may be a view with the checkpoint tensor's elements in order but another shape (a
    permuted q/k weight, see `hf_export.to_hf_state_dict(lazy_permute=True)`): a copy of the whole
    tensor into a contiguous destination then goes through a view of the destination, so the
    permutation happens inside the one copy."""
    for name, (shape, dtype, ops) in plan.items():
        t = tensors[name]
        for op in ops:
            dst = _dst(flat, dtype, op)
            if tuple(t.shape) != tuple(shape) and _whole(op, shape) and dst.is_contiguous():
                dst.view(t.shape).copy_(t)
            else:
                if tuple(t.shape) != tuple(shape):
                    t = t.reshape(shape)
                dst.copy_(_src(t, op))


def _whole(op: CopyOp, shape: tuple[int, ...]) -> bool:
    """Does the copy read the whole source tensor, in order?"""
    offset, size, stride = op[0], op[1], op[2]
    return offset == 0 and tuple(size) == tuple(shape) and tuple(stride) == torch.empty(shape, device="meta").stride()


def read_plan(flat: torch.Tensor, plan: Plan, names: Iterable[str]) -> Iterator[tuple[str, torch.Tensor]]:
    """The checkpoint tensors as the shared file now holds them (for hashing what is served)."""
    for name in names:
        shape, dtype, ops = plan[name]
        out = torch.empty(shape, dtype=dtype)
        for op in ops:
            _src(out, op).copy_(_dst(flat, dtype, op))
        yield name, out


def checkpoint_specs(model_dir: str) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
    """(name, shape, dtype) of every tensor in the folder's safetensors files (headers only)."""
    from pathlib import Path

    from safetensors import safe_open

    out: list[tuple[str, tuple[int, ...], torch.dtype]] = []
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                sl = f.get_slice(name)
                out.append((name, tuple(sl.get_shape()), _DTYPES[sl.get_dtype()]))
    return sorted(out)


_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64}
