"""What a job checkpoints and how a resumed job gets it back (files: `rlsvc/checkpoint.py`).

Everything that decides the next step is saved: the trainer ranks' model and optimiser (sharded,
torch.distributed.checkpoint), the reference model, the best validated weights, the replay
buffer, the policy version and the loop's counters. Deals and sampling seeds are functions of
(run seed, step), so a resumed run replays the same episodes from the same weights.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlsvc.checkpoint import is_remote, write_checkpoint


@dataclass
class Best:
    """The best validated policy so far: its greedy validation return, version and weights."""

    val_return: float
    version: int
    state: dict


def save(
    root: Path | str,
    step: int,
    loop: Any,
    best: Best | None,
    extra_state: dict,
    keep: int,
    model: Any = None,
    policy_files: dict[str, str] | None = None,
) -> Path | str:
    """Checkpoint after `step` steps under `root` (a folder or an object-store URI; never seen
    half-written: see `write_checkpoint`). With `model` (its
    rlsvc.models.spec), the current policy is also a Hugging Face folder, `policy/`, which
    `transformers` and vLLM load as is (resuming reads the sharded trainer state instead), with
    `policy_files` (name -> text) beside its weights."""
    from safetensors.torch import save_file

    svc = loop.svc

    def fill(folder: Path, trainer_dir: str) -> None:
        svc.trainer_group.save_checkpoint(trainer_dir)  # every rank its shards, straight there
        reference = svc.reference_model
        if reference is not None:
            if getattr(reference, "saves_weights", True):  # LoRA's reference is the trainer's base: nothing of its own
                save_file(reference.hf_state_dict(), str(folder / "reference.safetensors"))
            save_file(loop.reference_cache.state_dict(), str(folder / "reference_cache.safetensors"))
        if best is not None:
            save_file(best.state, str(folder / "best.safetensors"))
        if model is not None:
            model.save(folder / "policy", svc.trainer_group.hf_state_dict(), policy_files)
        snap = svc.buffer_client.snapshot()
        snap["items"] = [dataclasses.asdict(ep) for ep in snap["items"]]  # JSON, not pickle: loading runs no code
        (folder / "buffer.json").write_text(json.dumps(snap))

    state = {
        **extra_state,
        **loop.state_dict(),
        "best_val_return": best.val_return if best else None,
        "best_version": best.version if best else None,
    }
    return write_checkpoint(root, step, fill, state, keep)


def restore(checkpoint: Path | str, state: dict, loop: Any, trainer_spec: Any) -> Best | None:
    """Load a checkpoint (a folder, or its object-store URI) into the freshly started actors and
    the loop; returns the best policy."""
    if is_remote(checkpoint):  # the ranks read their shards from the store; the rest comes here
        from fsspec.core import url_to_fs

        fs, base = url_to_fs(str(checkpoint))
        with tempfile.TemporaryDirectory(prefix="rlsvc-restore-") as tmp:
            for path in fs.ls(base, detail=False):
                if fs.isfile(path):
                    fs.get_file(path, str(Path(tmp) / path.rsplit("/", 1)[-1]))
            return _restore(Path(tmp), f"{str(checkpoint).rstrip('/')}/trainer", state, loop, trainer_spec)
    return _restore(Path(checkpoint), str(Path(checkpoint) / "trainer"), state, loop, trainer_spec)


def _restore(folder: Path, trainer_dir: str, state: dict, loop: Any, trainer_spec: Any) -> Best | None:
    from safetensors.torch import load_file

    svc = loop.svc
    svc.trainer_group.load_checkpoint(trainer_dir)
    reference = svc.reference_model
    if reference is not None:
        if getattr(reference, "saves_weights", True):
            reference.setup(trainer_spec, load_file(str(folder / "reference.safetensors")))
        cache = folder / "reference_cache.safetensors"
        if cache.is_file():  # a checkpoint written before the cache existed has none
            loop.reference_cache.load_state_dict(load_file(str(cache)))
        else:
            loop.reference_cache.clear()
    from rlsvc.buffer.replay import Episode

    snap = json.loads((folder / "buffer.json").read_text())
    snap["items"] = [Episode(**ep) for ep in snap["items"]]
    svc.buffer_client.restore(snap)
    loop.load_state_dict(state)
    if state.get("best_version") is None:
        return None
    return Best(state["best_val_return"], state["best_version"], load_file(str(folder / "best.safetensors")))


def replay_ledger(path: Path) -> dict[int, list[int]]:
    """The steps that count from `trained.jsonl` (step -> trained group ids): a rewind to a
    checkpoint drops the steps after it, as their weight updates were discarded."""
    steps: dict[int, list[int]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if "rewind_to" in record:
            steps = {s: g for s, g in steps.items() if s <= record["rewind_to"]}
        else:
            steps[record["step"]] = record["groups"]
    return steps
