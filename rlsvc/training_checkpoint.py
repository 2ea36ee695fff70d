"""What a job checkpoints and how a resumed job gets it back (files: `rlsvc/checkpoint.py`).

Everything that decides the next step is saved: the trainer ranks' model and optimiser (sharded,
torch.distributed.checkpoint), the reference model, the best validated weights, the replay
buffer, the policy version and the loop's counters. Deals and sampling seeds are functions of
(run seed, step), so a resumed run replays the same episodes from the same weights.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlsvc.checkpoint import CHECKPOINTS, write_checkpoint


@dataclass
class Best:
    """The best validated policy so far: its greedy validation return, version and weights."""

    val_return: float
    version: int
    state: dict


def save(
    run_dir: Path,
    step: int,
    loop: Any,
    best: Best | None,
    extra_state: dict,
    keep: int,
    model: Any = None,
    policy_files: dict[str, str] | None = None,
) -> Path:
    """Checkpoint after `step` steps (atomic: see `write_checkpoint`). With `model` (its
    rlsvc.models.spec), the current policy is also a Hugging Face folder, `policy/`, which
    `transformers` and vLLM load as is (resuming reads the sharded trainer state instead), with
    `policy_files` (name -> text) beside its weights."""
    from safetensors.torch import save_file

    svc = loop.svc

    def fill(folder: Path) -> None:
        svc.trainer_group.save_checkpoint(str(folder / "trainer"))  # every rank its shards
        reference = svc.reference_model
        if reference is not None:
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
    return write_checkpoint(run_dir / CHECKPOINTS, step, fill, state, keep)


def restore(folder: Path, state: dict, loop: Any, trainer_spec: Any) -> Best | None:
    """Load a checkpoint into the freshly started actors and the loop; returns the best policy."""
    from safetensors.torch import load_file

    svc = loop.svc
    svc.trainer_group.load_checkpoint(str(folder / "trainer"))
    reference = svc.reference_model
    if reference is not None:
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
