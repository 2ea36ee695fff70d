"""Whether the optional transports can run here, decided without importing torch, so config
validation can refuse a choice with the exact reason before a cluster starts."""

from __future__ import annotations

import importlib.metadata
import importlib.util

SOURCE_HINT = (
    "install TorchStore from source (github.com/meta-pytorch/torchstore, commit 5a4d5d3 or later: "
    "pip install --no-deps <checkout> pygtrie portpicker)"
)


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def torchstore_unavailable_reason() -> str | None:
    torch_v, monarch_v = _version("torch"), _version("torchmonarch")
    if importlib.util.find_spec("torchstore") is None:
        return (
            f"weight_sync.type=torchstore: TorchStore is not installed. PyPI's latest (0.1.2) pins torch==2.9.0 and "
            f"torchmonarch==0.1.2 (here: torch {torch_v}, torchmonarch {monarch_v}) and its controller fails on "
            f"torchmonarch>=0.5 ('mixes both async and sync endpoints'); {SOURCE_HINT}"
        )
    ts_v = _version("torchstore")
    if ts_v in ("0.1.0", "0.1.1", "0.1.2"):
        return (
            f"weight_sync.type=torchstore: torchstore {ts_v} does not work with torchmonarch {monarch_v} (its controller "
            f"mixes sync and async endpoints, which Monarch>=0.5 rejects); {SOURCE_HINT}"
        )
    return None
