"""A rollout worker's model folder (files shipped through Ray) lives only as long as its process:
removed at exit, and, for a worker killed without exiting, by the next one started on the node."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rlsvc.cluster.actors import MODEL_FOLDER_PREFIX, materialise, owned_temp_folder
from tests.conftest import REPO


def test_a_dead_processs_folder_is_removed_and_a_live_ones_kept(tmp_path: Path):
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    dead = tmp_path / f"{MODEL_FOLDER_PREFIX}{done.stdout.strip()}-abc"
    live = tmp_path / f"{MODEL_FOLDER_PREFIX}{os.getppid()}-def"
    other = tmp_path / f"{MODEL_FOLDER_PREFIX}notapid"
    for folder in (dead, live, other):
        folder.mkdir()
        (folder / "config.json").write_text("{}")
    mine = owned_temp_folder(MODEL_FOLDER_PREFIX, root=str(tmp_path))
    assert mine.name.startswith(f"{MODEL_FOLDER_PREFIX}{os.getpid()}-") and mine.is_dir()
    assert not dead.exists() and live.exists() and other.exists()


def test_the_folder_goes_when_its_process_exits(tmp_path: Path):
    code = (
        "import sys; from pathlib import Path; from rlsvc.cluster.actors import materialise; "
        "import tempfile; tempfile.tempdir = sys.argv[1]; "
        "print(materialise({'files': {'config.json': b'{}'}}))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=REPO, check=True)
    folder = Path(done.stdout.strip().splitlines()[-1])
    assert folder.parent == tmp_path and not folder.exists()


def test_a_path_source_is_served_as_is(tmp_path: Path):
    assert materialise({"path": str(tmp_path)}) == str(tmp_path)
