"""The trainer side of every transport: gather the full weights once per version, describe them
in a manifest, and hand them out as buckets (views) or as one flat, reusable byte buffer."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import torch

from rlsvc.models.hf_export import hf_shape
from rlsvc.weight_sync.manifest import Manifest, build_manifest, digest_tensors, views


class WeightPublisher:
    """Wraps one trainer rank. `stage` is a collective over the trainer's ranks (the FSDP
    all-gather); only rank 0 keeps the gathered weights and answers the other calls."""

    def __init__(self, trainer: Any, bucket_bytes: int, verify: bool) -> None:
        self.trainer = trainer
        self.bucket_bytes = bucket_bytes
        self.verify = verify
        self.manifest: Manifest | None = None
        self._tensors: dict[str, torch.Tensor] = {}
        self._flats: dict[int, torch.Tensor] = {}

    @property
    def is_source(self) -> bool:
        return self.trainer.rank == 0

    def stage(self, version: int, lazy: bool = False) -> Manifest | None:
        """Gather version `version`; older staged versions are dropped. Rank 0 returns the manifest.

        The tensors kept here may alias live parameters (no copy on one rank): each transport
        snapshots them (into the object store, or into `flat()`) before the optimiser steps again.
        """
        if self.manifest is not None and version <= self.manifest.version:
            raise ValueError(f"stage(version={version}): version {self.manifest.version} was already published")
        t0 = time.perf_counter()
        lora = getattr(self.trainer, "lora", None)
        if lora is not None:  # the adapters only: the engines hold the frozen base already
            tensors = self.trainer.peft_adapter_state_dict()
        else:  # lazy: permuted q/k weights stay views (`raw`), written to their destination in one copy
            tensors = self.trainer.hf_state_dict(copy=False, lazy_permute=lazy)
        t1 = time.perf_counter()
        if not self.is_source:
            return None
        self.manifest, self._tensors = None, tensors
        shapes = {k: torch.empty(hf_shape(v), dtype=v.dtype, device="meta") for k, v in tensors.items()}
        manifest = build_manifest(version, shapes, self.bucket_bytes)
        if lora is not None:
            from rlsvc.trainer.lora import peft_config_json

            manifest.adapter_config = peft_config_json(lora, str(getattr(self.trainer.spec, "path", "")))
        if self.verify:
            manifest.digest = digest_tensors((s.name, self._hf(s.name)) for s in manifest.specs)
        manifest.timings = {"gather_s": t1 - t0, "digest_s": time.perf_counter() - t1}
        self.manifest = manifest
        return manifest

    def _require(self) -> Manifest:
        if self.manifest is None:
            raise RuntimeError("nothing staged: call stage(version) first")
        return self.manifest

    def _hf(self, name: str) -> torch.Tensor:
        t = self._tensors[name]
        return t.reshape(hf_shape(t)) if t.dim() == 4 else t

    def tensor(self, name: str) -> torch.Tensor:
        """The staged tensor in its HF shape."""
        self._require()
        return self._hf(name)

    def raw(self, name: str) -> torch.Tensor:
        """The staged tensor as gathered (a permuted q/k weight may be a 4-D view, see `stage`)."""
        self._require()
        return self._tensors[name]

    def flat_buffer(self, slot: int = 0) -> torch.Tensor:
        """The slot's buffer as last packed by `flat` (no copy)."""
        return self._flats[slot]

    def bucket(self, i: int) -> dict[str, torch.Tensor]:
        m = self._require()
        return {m.specs[j].name: self._hf(m.specs[j].name) for j in m.buckets[i]}

    def buckets(self) -> Iterator[dict[str, torch.Tensor]]:
        for i in range(len(self._require().buckets)):
            yield self.bucket(i)

    def flat(self, slot: int = 0) -> torch.Tensor:
        """The staged weights packed into one uint8 buffer, allocated once per slot and reused
        (so a transport can register it once, as RDMA needs). Two slots let receivers still read
        version v while v+1 is packed."""
        m = self._require()
        flat = self._flats.get(slot)
        if flat is None or flat.numel() != m.total_bytes:
            flat = self._flats[slot] = torch.empty(m.total_bytes, dtype=torch.uint8)
        for name, dst in views(flat, m.specs):
            raw = self._tensors[name]
            (dst.view(raw.shape) if raw.dim() == 4 else dst).copy_(raw)
        return flat

    def release(self) -> None:
        """Forget the staged version and free the packed buffers."""
        self.manifest, self._tensors = None, {}
        self._flats.clear()
