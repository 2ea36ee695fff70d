"""Checkpoint folders are never seen half-written and are checked on resume: a partial,
truncated or corrupted checkpoint is skipped, with the reason, for the previous one. Each test
runs on a local folder (written under a temporary name, then renamed) and on a real S3 server
(moto, on 127.0.0.1; files in place, the manifest written last as the commit marker)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import fsspec
import pytest

from rlsvc.checkpoint import CheckpointError, checkpoints, latest_checkpoint, problem, write_checkpoint


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path) -> str:
    """Where the checkpoints go: a local folder, or a prefix in a bucket of the test's S3 server."""
    if request.param == "local":
        return str(tmp_path / "checkpoints")
    return request.getfixturevalue("s3_bucket") + "/run/checkpoints"


def _fs(location):
    return fsspec.core.url_to_fs(str(location))


def _name(folder) -> str:
    return str(folder).rstrip("/").rsplit("/", 1)[-1]


def _fill(payload: bytes):
    def fill(folder, trainer_dir):
        fs, base = _fs(trainer_dir)  # as a trainer rank writes its shard: wherever it is told
        fs.makedirs(base, exist_ok=True)
        fs.pipe_file(f"{base}/__0_0.distcp", payload)
        (folder / "buffer.pkl").write_bytes(b"episodes")

    return fill


def test_write_then_find_the_newest_and_keep_only_the_last_two(root):
    for step in (10, 20, 30):
        write_checkpoint(root, step, _fill(bytes([step]) * 1000), {"version": step, "mlflow_run_id": "abc"}, keep=2)
    assert [_name(p) for p in checkpoints(root)] == ["step_00000030", "step_00000020"]
    folder, state, skipped = latest_checkpoint(root)
    assert _name(folder) == "step_00000030" and state == {"version": 30, "mlflow_run_id": "abc", "step": 30} and skipped == []
    fs, base = _fs(root)
    fs.invalidate_cache()
    assert sorted(_name(p) for p in fs.ls(base, detail=False)) == ["step_00000020", "step_00000030"]  # nothing temporary left
    assert sorted(p[len(base) + 1 :] for p in fs.find(base) if "step_00000030" in p) == [
        "step_00000030/MANIFEST.json",
        "step_00000030/buffer.pkl",
        "step_00000030/state.json",
        "step_00000030/trainer/__0_0.distcp",
    ]


def test_a_crash_mid_write_leaves_only_complete_checkpoints(root):
    write_checkpoint(root, 1, _fill(b"a" * 100), {})

    def crash(folder, trainer_dir):
        _fill(b"b" * 100)(folder, trainer_dir)  # the ranks' shards are written
        raise KeyboardInterrupt  # the process dies while writing

    with pytest.raises(KeyboardInterrupt):
        write_checkpoint(root, 2, crash, {})
    assert latest_checkpoint(root)[0:2] == (checkpoints(root)[-1], {"step": 1})
    assert [_name(p) for p in checkpoints(root)] == (["step_00000001"] if "://" not in root else ["step_00000002", "step_00000001"])
    fs, base = _fs(root)
    if "://" not in root:  # a folder from a hard kill (never renamed, no manifest) is not a checkpoint either
        fs.makedirs(f"{base}/.step_00000002.tmp-x")
    assert _name(latest_checkpoint(root)[0]) == "step_00000001"
    # the unfinished step written again, whole
    write_checkpoint(root, 2, _fill(b"c" * 50), {})
    assert _name(latest_checkpoint(root)[0]) == "step_00000002" and problem(checkpoints(root)[0]) is None


def _rewrite(folder, name: str, data: bytes | None) -> None:
    fs, base = _fs(folder)
    if data is None:
        fs.rm_file(f"{base}/{name}")
    else:
        fs.pipe_file(f"{base}/{name}", data)


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda f: _rewrite(f, "MANIFEST.json", None), "no MANIFEST.json"),
        (lambda f: _rewrite(f, "buffer.pkl", None), "buffer.pkl is missing"),
        (lambda f: _rewrite(f, "trainer/__0_0.distcp", b"n" * 10), "has 10 bytes"),
        (lambda f: _rewrite(f, "trainer/__0_0.distcp", b"x" * 900), "does not match its checksum"),
        (lambda f: _rewrite(f, "MANIFEST.json", b"{"), "unreadable MANIFEST.json"),
    ],
)
def test_a_damaged_checkpoint_is_skipped_for_the_previous_one(root, damage, reason):
    write_checkpoint(root, 5, _fill(b"old" * 300), {"version": 5})
    newest = write_checkpoint(root, 6, _fill(b"new" * 300), {"version": 6})
    damage(newest)
    assert reason in problem(newest)
    folder, state, skipped = latest_checkpoint(root)
    assert _name(folder) == "step_00000005" and state["version"] == 5
    assert len(skipped) == 1 and "step_00000006" in skipped[0] and reason in skipped[0]


def test_no_usable_checkpoint_is_one_clear_error(root):
    with pytest.raises(CheckpointError, match="no checkpoints in"):
        latest_checkpoint(root + "-missing")
    only = write_checkpoint(root, 3, _fill(b"z" * 10), {})
    fs, base = _fs(only)
    text = fs.cat_file(f"{base}/state.json")
    _rewrite(only, "state.json", text.replace(b"3", b"4"))  # same size, different bytes
    with pytest.raises(CheckpointError, match=r"no usable checkpoint \(skipping checkpoint step_00000003: state.json does not match"):
        latest_checkpoint(root)


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


def test_an_object_store_that_cannot_be_written_or_read_is_one_line_before_any_cluster(s3_bucket):
    """A bucket that does not exist, or a run folder that is not in the bucket: exit 2, one
    line naming it, no traceback."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    train = [sys.executable, "-m", "rlsvc.train"]
    missing_bucket = subprocess.run(
        [*train, "run.output_dir=s3://rlsvc-no-such-bucket/runs"], env=env, capture_output=True, text=True, timeout=120
    )
    assert missing_bucket.returncode == 2 and "Traceback" not in missing_bucket.stderr, missing_bucket.stderr
    [line] = missing_bucket.stderr.strip().splitlines()
    assert line.startswith("rlsvc.train: run.output_dir: cannot write s3://rlsvc-no-such-bucket/runs:") and "bucket does not exist" in line
    not_a_run = subprocess.run([*train, "--resume", f"{s3_bucket}/runs/nothing-here"], env=env, capture_output=True, text=True, timeout=120)
    assert not_a_run.returncode == 2 and "Traceback" not in not_a_run.stderr, not_a_run.stderr
    assert not_a_run.stderr.strip() == f"rlsvc.train: not a run folder (no config.yaml): {s3_bucket}/runs/nothing-here"
    import tempfile

    assert not list(Path(tempfile.gettempdir()).glob("rlsvc-staging-*/nothing-here"))  # the refused folder's staging is gone


def test_a_finished_object_store_runs_staging_copy_is_removed_after_its_upload(tmp_path):
    import fsspec

    from rlsvc.run_folder import create

    folder = create("memory://rlsvc-test-runs", "run-1")
    (folder.local / "result.json").write_text("{}")
    folder.sync()
    staging = folder.local.parent
    folder.discard_staging()
    assert not staging.exists() and fsspec.filesystem("memory").exists("/rlsvc-test-runs/run-1/result.json")
    local = create(str(tmp_path), "run-2")  # a local run folder is the run itself: it stays
    local.discard_staging()
    assert local.local.is_dir()
