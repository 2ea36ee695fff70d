"""Training checkpoints that are never half-written, and finding the newest usable one.

A checkpoint is a folder `checkpoints/step_00000025/` in the run folder. On a local (or shared)
file system it is written under a temporary name, closed with `MANIFEST.json` (every file's size
and sha256), and only then renamed into place, so a crash at any moment leaves either the
previous checkpoints or a complete new one. In an object store (`s3://`, `gs://`: any fsspec
file system; object stores have no rename) the folder is written in place and `MANIFEST.json`
is written last, as the commit marker: a folder without one is an unfinished write, and removing
a checkpoint removes its manifest first. On resume every file is checked against the manifest; a
folder that fails (a partial copy, a flipped byte, a missing file) is skipped, with the reason,
in favour of the one before it.

What goes in (see `rlsvc/job/training_checkpoint.py`): the trainer ranks' model and optimiser as a sharded
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
from typing import Any

from rlsvc.saved_policy import CheckpointError  # one class: saved_policy.py travels alone in MLflow models

CHECKPOINTS = "checkpoints"  # in the run folder
MANIFEST = "MANIFEST.json"
STATE = "state.json"
PREFIX = "step_"


@dataclass
class ResumePoint:
    """A checked checkpoint to continue from (`rlsvc.train --resume RUN_FOLDER`)."""

    run: Any
    """The run folder (rlsvc.run_folder.RunFolder): local, or staged from an object store."""
    folder: Path | str
    """The checkpoint: a local folder, or its object-store URI."""
    state: dict


def step_dir_name(step: int) -> str:
    return f"{PREFIX}{step:08d}"


def folder_name(folder: Path | str) -> str:
    """`step_00000025`, for a local folder or an object-store URI alike."""
    return str(folder).rstrip("/").rsplit("/", 1)[-1]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def is_remote(location: str | Path) -> bool:
    """An object-store URI (`s3://...`); plain paths and `file://` URIs are local."""
    text = str(location)
    return "://" in text and not text.startswith("file://")


def _fs(location: str | Path) -> tuple[Any, str]:
    from fsspec.core import url_to_fs

    return url_to_fs(str(location))


def _sha256_remote(fs: Any, path: str) -> str:
    h = hashlib.sha256()
    with fs.open(path, "rb") as f:
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


Fill = Callable[[Path, str], None]
"""`fill(folder, trainer_dir)` writes a checkpoint's files into the local `folder`, and has the
trainer ranks write their shards to `trainer_dir` (inside it, or in the object store)."""


def _seal(tmp: Path, step: int, state: dict, remote_files: dict[str, dict] | None = None) -> dict:
    (tmp / STATE).write_text(json.dumps({**state, "step": step}, indent=2))
    files = {str(p.relative_to(tmp)): {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in _files(tmp)}
    return {"step": step, "files": {**(remote_files or {}), **files}}


def write_checkpoint(root: Path | str, step: int, fill: Fill, state: dict, keep: int = 2) -> Path | str:
    """Write checkpoint `step` under `root` (a folder or an object-store URI) so that no reader
    sees it half-written: `fill` writes the payload, then `state.json` and the manifest are added.
    Keeps the newest `keep` checkpoints."""
    if is_remote(root):
        return _write_remote(str(root).rstrip("/"), step, fill, state, keep)
    root = Path(_fs(root)[1])

    def fill_and_seal(tmp: Path) -> None:
        fill(tmp, str(tmp / "trainer"))
        (tmp / MANIFEST).write_text(json.dumps(_seal(tmp, step, state), indent=2))
        _fsync_tree(tmp)

    # the same step again (a resumed run re-reaching it) replaces the folder whole
    final = write_folder_atomically(root / step_dir_name(step), fill_and_seal)
    for stale in checkpoints(root)[keep:]:
        shutil.rmtree(stale, ignore_errors=True)
    return final


def _write_remote(root: str, step: int, fill: Fill, state: dict, keep: int) -> str:
    """Object stores: the files in place, the manifest last (the commit marker)."""
    fs, _ = _fs(root)
    final = f"{root}/{step_dir_name(step)}"
    _remove_remote(fs, final)  # the same step again: the old one is unmarked, then dropped
    with tempfile.TemporaryDirectory(prefix="rlsvc-ckpt-") as staged:
        tmp = Path(staged)
        fill(tmp, f"{final}/trainer")  # the trainer ranks write their shards there themselves
        _, base = _fs(final)
        fs.invalidate_cache()  # the ranks wrote from other processes: listings cached here are stale
        # what the ranks wrote, hashed where it lies
        remote = {p[len(base) + 1 :]: {"bytes": fs.info(p)["size"], "sha256": _sha256_remote(fs, p)} for p in fs.find(f"{base}/trainer")}
        manifest = _seal(tmp, step, state, remote)
        for p in _files(tmp):
            fs.put_file(str(p), f"{base}/{p.relative_to(tmp)}")
    fs.pipe_file(f"{base}/{MANIFEST}", json.dumps(manifest, indent=2).encode())
    for stale in checkpoints(root)[keep:]:
        _remove_remote(fs, str(stale))
    return final


def _remove_remote(fs: Any, folder: str) -> None:
    _, base = _fs(folder)
    if fs.exists(f"{base}/{MANIFEST}"):
        fs.rm_file(f"{base}/{MANIFEST}")  # first: a checkpoint half removed is not a checkpoint
    if fs.exists(base):
        fs.rm(base, recursive=True)


def checkpoints(root: Path | str) -> list:
    """Checkpoint folders under `root` (Paths, or URIs in an object store), newest first
    (temporary ones excluded)."""

    def is_step(name: str) -> bool:
        return name.startswith(PREFIX) and name[len(PREFIX) :].isdigit()

    if is_remote(root):
        fs, base = _fs(root)
        fs.invalidate_cache()
        root = str(root).rstrip("/")
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(base, detail=False)] if fs.isdir(base) else []
        found: list = [f"{root}/{n}" for n in names if is_step(n)]
    else:
        root = Path(_fs(root)[1])
        found = [p for p in root.iterdir() if p.is_dir() and is_step(p.name)] if root.is_dir() else []
    return sorted(found, key=lambda p: int(str(p).rsplit(PREFIX, 1)[-1]), reverse=True)


def problem(folder: Path | str) -> str | None:
    """Why `folder` is not a usable checkpoint, or None when every file matches its manifest."""
    fs, base = _fs(folder)
    fs.invalidate_cache()  # another process (an earlier job, a rank) may have written it
    try:
        manifest = json.loads(fs.cat_file(f"{base}/{MANIFEST}"))["files"]
    except FileNotFoundError:
        return "no MANIFEST.json (the write did not finish)"
    except (ValueError, KeyError, TypeError) as e:
        return f"unreadable MANIFEST.json ({e})"
    sizes = {p[len(base) + 1 :]: info["size"] for p, info in fs.find(base, detail=True).items()}
    for name, want in manifest.items():
        if name not in sizes:
            return f"{name} is missing"
        if sizes[name] != want["bytes"]:
            return f"{name} has {sizes[name]} bytes, the manifest says {want['bytes']}"
        if _sha256_remote(fs, f"{base}/{name}") != want["sha256"]:
            return f"{name} does not match its checksum"
    extra = set(sizes) - set(manifest) - {MANIFEST}
    return f"unexpected files {sorted(extra)}" if extra else None


def latest_checkpoint(root: Path | str) -> tuple[Any, dict, list[str]]:
    """The newest usable checkpoint under `root`, its state, and a line for each newer one that
    was skipped and why. Raises CheckpointError when there is none."""
    skipped: list[str] = []
    for folder in checkpoints(root):
        why = problem(folder)
        name = folder_name(folder)
        if why is None:
            fs, base = _fs(folder)
            return folder, json.loads(fs.cat_file(f"{base}/{STATE}")), skipped
        skipped.append(f"skipping checkpoint {name}: {why}")
    where = "no checkpoints" if not skipped else "no usable checkpoint (" + "; ".join(skipped) + ")"
    raise CheckpointError(f"{where} in {root}")
