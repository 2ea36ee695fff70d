"""Training checkpoints that are never half-written, and finding the newest usable one.

A checkpoint is a folder `checkpoints/step_00000025/` in the run folder. It is written under a
temporary name, closed with `MANIFEST.json` (every file's size and sha256), and only then renamed
into place, so a crash at any moment leaves either the previous checkpoints or a complete new
one. On resume every file is checked against the manifest; a folder that fails (a partial copy,
a flipped byte, a missing file) is skipped, with the reason, in favour of the one before it.

What goes in (see `rlsvc/job.py`): the trainer ranks' model and optimiser as a sharded
torch.distributed.checkpoint (`trainer/`), the reference and best-validated weights, the replay
buffer's episodes, and `state.json` (step, policy version, counters, the MLflow run id).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CHECKPOINTS = "checkpoints"  # in the run folder
MANIFEST = "MANIFEST.json"
STATE = "state.json"
PREFIX = "step_"


@dataclass
class ResumePoint:
    """A checked checkpoint to continue from (`rlsvc.train --resume RUN_FOLDER`)."""

    run_dir: Path
    folder: Path
    state: dict


class CheckpointError(ValueError):
    """No usable checkpoint (missing folder, or every checkpoint in it incomplete or corrupt)."""


def step_dir_name(step: int) -> str:
    return f"{PREFIX}{step:08d}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def _fsync_tree(folder: Path) -> None:
    for p in [*_files(folder), folder / MANIFEST]:
        with p.open("rb") as f:
            os.fsync(f.fileno())
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_folder_atomically(final: Path, fill: Callable[[Path], None]) -> Path:
    """`fill(tmp)` writes a folder's contents into a temporary sibling, which is then renamed to
    `final`: a reader (vLLM, a resumed job) sees no folder or a complete one, never a half-written
    one. An existing `final` is replaced; on any error the temporary folder is removed."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        fill(tmp)
        if final.exists():
            # rename() cannot replace a non-empty folder: move the old one aside, then drop it.
            old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
            os.replace(final, old / "ckpt")
            os.replace(tmp, final)
            shutil.rmtree(old)
        else:
            os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return final


def write_checkpoint(root: Path, step: int, fill: Callable[[Path], None], state: dict, keep: int = 2) -> Path:
    """Write checkpoint `step` under `root` atomically: `fill(tmp)` writes the payload into a
    temporary folder, then `state.json` and the manifest are added, everything is fsynced, and
    the folder is renamed into place. Keeps the newest `keep` checkpoints."""

    def fill_and_seal(tmp: Path) -> None:
        fill(tmp)
        (tmp / STATE).write_text(json.dumps({**state, "step": step}, indent=2))
        manifest = {str(p.relative_to(tmp)): {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in _files(tmp)}
        (tmp / MANIFEST).write_text(json.dumps({"step": step, "files": manifest}, indent=2))
        _fsync_tree(tmp)

    # the same step again (a resumed run re-reaching it) replaces the folder whole
    final = write_folder_atomically(root / step_dir_name(step), fill_and_seal)
    for stale in checkpoints(root)[keep:]:
        shutil.rmtree(stale, ignore_errors=True)
    return final


def checkpoints(root: Path) -> list[Path]:
    """Checkpoint folders under `root`, newest first (temporary ones excluded)."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX) and p.name[len(PREFIX) :].isdigit()]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX) :]), reverse=True)


def problem(folder: Path) -> str | None:
    """Why `folder` is not a usable checkpoint, or None when every file matches its manifest."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())["files"]
    except FileNotFoundError:
        return "no MANIFEST.json (the write did not finish)"
    except (ValueError, KeyError, TypeError) as e:
        return f"unreadable MANIFEST.json ({e})"
    for name, want in manifest.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != want["bytes"]:
            return f"{name} has {path.stat().st_size} bytes, the manifest says {want['bytes']}"
        if _sha256(path) != want["sha256"]:
            return f"{name} does not match its checksum"
    extra = {str(p.relative_to(folder)) for p in _files(folder)} - set(manifest)
    return f"unexpected files {sorted(extra)}" if extra else None


def latest_checkpoint(root: Path) -> tuple[Path, dict, list[str]]:
    """The newest usable checkpoint under `root`, its state, and a line for each newer one that
    was skipped and why. Raises CheckpointError when there is none."""
    skipped: list[str] = []
    for folder in checkpoints(root):
        why = problem(folder)
        if why is None:
            return folder, json.loads((folder / STATE).read_text()), skipped
        skipped.append(f"skipping checkpoint {folder.name}: {why}")
    where = "no checkpoints" if not skipped else "no usable checkpoint (" + "; ".join(skipped) + ")"
    raise CheckpointError(f"{where} in {root}")
