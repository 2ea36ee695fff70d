"""What a published policy version is made of: versioned keys, tensor specs, buckets, a digest.

Every transport moves the same thing: the trainer's full weights in Hugging Face names (what
vLLM loads), in a fixed order, cut into buckets so the receiving engine can load bucket i while
bucket i+1 is still on the wire. The manifest travels first (it is small); the receiver checks it
against its own checkpoint's names before touching a single live weight.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import blake3
import torch

KEY_PREFIX = "policy_ver_"


def versioned_key(version: int, name: str) -> str:
    """`policy_ver_0000000042.model.layers.0.mlp.up_proj.weight` (TorchForge's convention)."""
    return f"{KEY_PREFIX}{version:010d}.{name}"


def split_key(key: str) -> tuple[int, str]:
    """Inverse of `versioned_key`."""
    if not key.startswith(KEY_PREFIX):
        raise ValueError(f"not a versioned weight key: {key!r}")
    version, _, name = key[len(KEY_PREFIX) :].partition(".")
    return int(version), name


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    offset: int
    """Byte offset in the version's flat buffer (transports that move one contiguous region)."""

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * torch.empty((), dtype=self.dtype).element_size()


@dataclass
class Manifest:
    version: int
    specs: list[TensorSpec]
    buckets: list[list[int]]
    """Indices into `specs`, in transfer order; each bucket is at most `bucket_bytes` (or one tensor)."""
    digest: str | None = None
    """`digest_tensors` of the published weights; the receiver recomputes it over what it loaded."""
    timings: dict[str, float] = field(default_factory=dict)
    adapter_config: dict | None = None
    """With LoRA (`model.lora`): the version is the policy's adapters only, in PEFT's names, and
    this is their `adapter_config.json`; the engines register it as a LoRA adapter on their base."""

    @property
    def total_bytes(self) -> int:
        return sum(s.nbytes for s in self.specs)

    def keys(self) -> list[str]:
        return [versioned_key(self.version, s.name) for s in self.specs]

    def bucket_bytes(self, i: int) -> tuple[int, int]:
        """(start, end) byte range of bucket i in the flat buffer (buckets are contiguous)."""
        specs = [self.specs[j] for j in self.buckets[i]]
        return specs[0].offset, specs[-1].offset + specs[-1].nbytes


def build_manifest(version: int, tensors: dict[str, torch.Tensor], bucket_bytes: int) -> Manifest:
    """Specs in a fixed (sorted) order, flat offsets, and contiguous buckets of <= bucket_bytes."""
    specs: list[TensorSpec] = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        spec = TensorSpec(name, tuple(t.shape), t.dtype, offset)
        specs.append(spec)
        offset += spec.nbytes
    buckets: list[list[int]] = []
    size = 0
    for i, spec in enumerate(specs):
        if not buckets or size + spec.nbytes > bucket_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append(i)
        size += spec.nbytes
    return Manifest(version, specs, buckets)


def views(flat: torch.Tensor, specs: Iterable[TensorSpec], base: int = 0) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) views into a flat uint8 buffer that starts at byte `base` of the layout."""
    for s in specs:
        start = s.offset - base
        yield s.name, flat[start : start + s.nbytes].view(s.dtype).view(s.shape)


class Digest:
    """BLAKE3 over (name, dtype, shape, bytes) of each tensor, in the order given, 16 bytes.

    Both sides of every push hash every weight (the trainer what it publishes, each engine what
    it loaded), so the hash is on the step's path: BLAKE3 (the `blake3` package) is several times
    faster per core than hashlib's blake2b, used before (docs/weight-sync.md measures the step).
    One thread: in the asynchronous loop the other cores are training.
    """

    def __init__(self) -> None:
        self._h = blake3.blake3()

    def update(self, name: str, tensor: torch.Tensor) -> None:
        t = tensor.detach().to("cpu").contiguous()
        self._h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        # bytes through a uint8 view: every dtype (bf16 included), no numpy dtype needed
        self._h.update(t.view(-1).view(torch.uint8).numpy().data)

    def hexdigest(self) -> str:
        return self._h.hexdigest(length=16)


def digest_tensors(items: Iterable[tuple[str, torch.Tensor]]) -> str:
    d = Digest()
    for name, t in items:
        d.update(name, t)
    return d.hexdigest()
