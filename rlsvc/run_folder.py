"""A run's folder: on a local (or shared) file system, or in an object store.

`run.output_dir` may be a folder or an fsspec URI (`s3://bucket/runs`, `gs://...`, `file://...`).
In an object store the driver writes its files (config, ledgers, transcripts, reward curve,
result, the final Hugging Face checkpoint) into a local staging folder and uploads them at every
checkpoint and at the end (`sync`); checkpoints go straight to the store, each trainer rank
writing its own shards (rlsvc/checkpoint.py). `--resume URI` downloads the staged files again
and restores from the newest complete checkpoint in the store. fsspec (s3fs for `s3://`) does
the I/O; credentials and endpoints come from the usual environment (`AWS_*`), which the job's
runtime env carries to the actors.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rlsvc.checkpoint import CHECKPOINTS, is_remote

FINAL = "checkpoint"  # the final Hugging Face folder, in the run folder


@dataclass
class RunFolder:
    local: Path
    """The folder the driver writes: the run folder itself, or its staging copy."""
    remote: str | None = None
    """The run folder's object-store URI, or None when `local` is the run folder."""

    @property
    def name(self) -> str:
        return self.local.name

    @property
    def location(self) -> str:
        """Where the run lives, for people: the URI, or the local path."""
        return self.remote or str(self.local)

    @property
    def checkpoints(self) -> Path | str:
        """Where checkpoints are written (rlsvc.checkpoint.write_checkpoint's `root`)."""
        return f"{self.remote}/{CHECKPOINTS}" if self.remote else self.local / CHECKPOINTS

    def sync(self) -> None:
        """Upload the staged files (each whole, replacing the previous upload) to the store."""
        if self.remote is None:
            return
        from fsspec.core import url_to_fs

        fs, base = url_to_fs(self.remote)
        for path in sorted(p for p in self.local.rglob("*") if p.is_file()):
            fs.put_file(str(path), f"{base}/{path.relative_to(self.local)}")

    def discard_staging(self) -> None:
        """Remove the local staging copy of an object-store run (after its last upload); a
        local run folder is the run itself and stays."""
        if self.remote is not None:
            import shutil

            shutil.rmtree(self.local.parent, ignore_errors=True)  # the mkdtemp folder `_staging` made


def create(output_dir: str, name: str) -> RunFolder:
    """A new run folder `output_dir/name` (refused if it exists)."""
    if not is_remote(output_dir):
        local = Path(output_dir.removeprefix("file://")).resolve() / name
        local.mkdir(parents=True, exist_ok=False)
        return RunFolder(local)
    remote = f"{output_dir.rstrip('/')}/{name}"
    from fsspec.core import url_to_fs

    fs, base = url_to_fs(remote)
    if fs.exists(base):
        raise FileExistsError(f"run folder {remote} exists")
    return RunFolder(_staging(name), remote)


def open_existing(location: str) -> RunFolder:
    """An existing run folder, to resume: a local one as it is; one in an object store staged
    locally (everything but its checkpoints, which are read from the store)."""
    if not is_remote(location):
        return RunFolder(Path(location.removeprefix("file://")).resolve())
    from fsspec.core import url_to_fs

    remote = location.rstrip("/")
    fs, base = url_to_fs(remote)
    local = _staging(remote.rsplit("/", 1)[-1])
    for path in fs.find(base):
        rel = path[len(base) + 1 :]
        if rel.split("/", 1)[0] not in (CHECKPOINTS, FINAL):
            (local / rel).parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(path, str(local / rel))
    return RunFolder(local, remote)


def _staging(name: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="rlsvc-staging-")) / name
    folder.mkdir()
    return folder


class StorageError(ValueError):
    """`run.output_dir` names an object store this job cannot write."""


def check_writable(output_dir: str) -> None:
    """Before any cluster starts: an object-store `output_dir` can be written (a probe object
    is written and removed). One line on failure: no fsspec implementation for the scheme
    (`pip install s3fs`), no credentials, no bucket."""
    if not is_remote(output_dir):
        return
    probe = f"{output_dir.rstrip('/')}/.rlsvc-write-probe-{os.getpid()}"
    try:
        from fsspec.core import url_to_fs

        fs, base = url_to_fs(probe)
        fs.pipe_file(base, b"")
        fs.rm_file(base)
    except Exception as e:  # the file system's own reason, on one line
        reason = " ".join(str(e).split()) or type(e).__name__
        raise StorageError(f"run.output_dir: cannot write {output_dir}: {type(e).__name__}: {reason}") from e
