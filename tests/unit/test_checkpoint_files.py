"""Checkpoint folders are written atomically and checked on resume: a partial, truncated or
corrupted checkpoint is skipped, with the reason, for the previous one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rlsvc.checkpoint import CheckpointError, checkpoints, latest_checkpoint, problem, write_checkpoint


def _fill(payload: bytes):
    def fill(folder):
        (folder / "trainer").mkdir()
        (folder / "trainer" / "__0_0.distcp").write_bytes(payload)
        (folder / "buffer.pkl").write_bytes(b"episodes")

    return fill


def test_write_then_find_the_newest_and_keep_only_the_last_two(tmp_path):
    for step in (10, 20, 30):
        write_checkpoint(tmp_path, step, _fill(bytes([step]) * 1000), {"version": step, "mlflow_run_id": "abc"}, keep=2)
    assert [p.name for p in checkpoints(tmp_path)] == ["step_00000030", "step_00000020"]
    folder, state, skipped = latest_checkpoint(tmp_path)
    assert folder.name == "step_00000030" and state == {"version": 30, "mlflow_run_id": "abc", "step": 30} and skipped == []
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folders left


def test_a_crash_mid_write_leaves_only_complete_checkpoints(tmp_path):
    write_checkpoint(tmp_path, 1, _fill(b"a" * 100), {})

    def crash(folder):
        _fill(b"b" * 100)(folder)
        raise KeyboardInterrupt  # the process dies while writing

    with pytest.raises(KeyboardInterrupt):
        write_checkpoint(tmp_path, 2, crash, {})
    assert [p.name for p in tmp_path.iterdir()] == ["step_00000001"]
    # a folder from a hard kill (never renamed, no manifest) is not a checkpoint either
    (tmp_path / ".step_00000002.tmp-x").mkdir()
    assert latest_checkpoint(tmp_path)[0].name == "step_00000001"


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda f: (f / "MANIFEST.json").unlink(), "no MANIFEST.json"),
        (lambda f: (f / "buffer.pkl").unlink(), "buffer.pkl is missing"),
        (lambda f: os.truncate(f / "trainer" / "__0_0.distcp", 10), "has 10 bytes"),
        (lambda f: (f / "trainer" / "__0_0.distcp").write_bytes(b"x" * 900), "does not match its checksum"),
        (lambda f: (f / "MANIFEST.json").write_text("{"), "unreadable MANIFEST.json"),
    ],
)
def test_a_damaged_checkpoint_is_skipped_for_the_previous_one(tmp_path, damage, reason):
    write_checkpoint(tmp_path, 5, _fill(b"old" * 300), {"version": 5})
    newest = write_checkpoint(tmp_path, 6, _fill(b"new" * 300), {"version": 6})
    damage(newest)
    assert reason in problem(newest)
    folder, state, skipped = latest_checkpoint(tmp_path)
    assert folder.name == "step_00000005" and state["version"] == 5
    assert len(skipped) == 1 and "step_00000006" in skipped[0] and reason in skipped[0]


def test_no_usable_checkpoint_is_one_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoints in"):
        latest_checkpoint(tmp_path / "missing")
    only = write_checkpoint(tmp_path, 3, _fill(b"z" * 10), {})
    text = (only / "state.json").read_text()
    (only / "state.json").write_text(text.replace("3", "4"))  # same size, different bytes
    with pytest.raises(CheckpointError, match=r"no usable checkpoint \(skipping checkpoint step_00000003: state.json does not match"):
        latest_checkpoint(tmp_path)


def test_resume_refuses_a_folder_without_a_usable_checkpoint(tmp_path):
    """One line and exit 2, before Ray or torch start."""
    bare = tmp_path / "blackjack_tiny-x"
    (bare / "checkpoints" / "step_00000005").mkdir(parents=True)  # a write that never finished
    (bare / "config.yaml").write_text("run:\n  name: blackjack_tiny\n")
    out = subprocess.run(
        [sys.executable, "-m", "rlsvc.train", "--resume", str(bare)],
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "no usable checkpoint" in out.stderr and "step_00000005: no MANIFEST.json" in out.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "rlsvc.train", "--resume", str(tmp_path / "nope")],
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and "not a run folder" in missing.stderr
