"""The quickstart notebook, and exact resume after a SIGKILL, which takes the notebook's run as
its uninterrupted reference (one job start fewer in CI).

notebooks/quickstart.ipynb is executed top to bottom by nbclient: it trains the tiny default for a
few steps through the real job, evaluates the checkpoint, shows the strategy and transcripts, and
loads the policy back from MLflow. (compare_runs.ipynb runs in test_code_training.py, on the two
real runs made there.)

Exact resume: the same job, its run folder in S3 (a real S3 server on 127.0.0.1), its driver
killed with SIGKILL right after its first checkpoint,
resumed with `--resume`, that resumed job preempted with SIGTERM a step later (it finishes the
step in flight, writes a checkpoint and exits with 143) and resumed again, ends with the same
per-step metrics, weights and evaluation as the notebook's uninterrupted run, in one MLflow run
with continuous step numbers. Exact, not
approximately: on CPU every part is deterministic given the checkpoint. Deals and vLLM's
per-request sampling seeds are functions of (run seed, step); the trainer's model and AdamW state
come back bit for bit from the sharded checkpoint; the rollout engine gets the trainer's weights
by weight sync; the replay buffer and counters are restored. How often a job checkpoints does
not change what it computes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
STEPS, EVERY, EVAL_EPISODES = 6, 3, 2000
# per-step metrics that do not measure time
COMPARED = ("return_mean", "loss", "kl", "entropy", "grad_norm", "clip_frac", "win_rate", "hit_rate", "logprob_mismatch", "policy_version")


def _env() -> dict:
    return {**os.environ, "RAY_AUTH_MODE": "disabled"}


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory, run_notebook):
    """The notebook run: its outputs (text, PNG count) and the job's result.json."""
    work = tmp_path_factory.mktemp("quickstart")
    text, pngs = run_notebook(
        "quickstart.ipynb",
        {
            "RLSVC_NB_STEPS": str(STEPS),
            "RLSVC_NB_WORKDIR": str(work),
            "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}",
            "RLSVC_NB_EVAL_EPISODES": str(EVAL_EPISODES),
            "RAY_AUTH_MODE": "disabled",
        },
    )
    [result] = [json.loads(p.read_text()) for p in (work / "runs").glob("blackjack_tiny-*/result.json")]
    return text, pngs, result


def test_quickstart_notebook(quickstart):
    text, pngs, result = quickstart
    assert pngs == 1  # the run's reward curve
    assert "rlsvc run summary" in text and "trained policy" in text and "stick at 17" in text
    assert "player sum" in text and "logprob" in text and "runs:/" in text
    assert result["steps"] == STEPS and Path(result["checkpoint"], "model.safetensors").is_file()


def _history(uri: str, run_id: str) -> dict[str, dict[int, float]]:
    """metric -> step -> value; where a step was logged twice (redone after the kill), the last."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    out = {}
    for key in COMPARED:
        points = sorted(client.get_metric_history(run_id, key), key=lambda m: (m.timestamp, m.step))
        out[key] = {m.step: m.value for m in points}
    return out


def _stop_group(proc: subprocess.Popen) -> None:
    """Whatever of a stopped job's local Ray cluster outlived it (Ray ties its processes to the driver)."""
    time.sleep(5)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _ledger(text: str) -> tuple[int, list[int]]:
    """How many rewinds a run's ledger has (trained.jsonl, rlsvc/job/steps.py: a resumed job starts
    with one), and the steps trained since the last."""
    rewinds, steps = 0, []
    for line in text.splitlines():
        record = json.loads(line)
        rewinds, steps = (rewinds + 1, []) if "rewind_to" in record else (rewinds, [*steps, record["step"]])
    return rewinds, steps


def _resumed_and_stepped(staged: list[Path]) -> bool:
    """Whether a resumed driver's ledger (in its local staging copy of the run, written every
    step; the bucket's copy is uploaded at checkpoints) shows a step trained since the resume."""
    for folder in staged:
        try:
            rewinds, steps = _ledger((folder / "trained.jsonl").read_text())
        except FileNotFoundError:
            continue
        if rewinds and steps:
            return True
    return False


def test_a_run_in_s3_killed_resumed_preempted_and_resumed_matches_an_uninterrupted_run(tmp_path: Path, quickstart, s3_bucket: str):
    """run.output_dir on a real S3 server (moto, 127.0.0.1): the checkpoints (the trainer rank's
    shards written by the rank itself, the manifest last) and the run's files land in the bucket,
    nothing in a local run folder. The job is SIGKILLed right after its first checkpoint;
    `--resume s3://...` continues it and is preempted with SIGTERM a step later (it finishes the
    step in flight, writes a checkpoint and exits with 143); a second `--resume` finishes it with
    the uninterrupted run's per-step metrics, weights and evaluation, in one MLflow run with
    continuous step numbers. (Resuming a local run folder takes the same path once the run is
    staged: rlsvc/run_folder.py; tests/unit/test_checkpoint_files.py reads local folders.)"""
    import fsspec

    ref_result = quickstart[2]
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    bucket = s3_bucket.removeprefix("s3://")
    cmd = [
        *(sys.executable, "-m", "rlsvc.train", f"run.steps={STEPS}", f"run.checkpoint_every={EVERY}", f"eval.episodes={EVAL_EPISODES}"),
        *(f"run.output_dir={s3_bucket}/runs", f"tracking.tracking_uri=sqlite:///{tmp_path / 'run.db'}"),
    ]
    # the same job as the notebook's, killed with SIGKILL as soon as its first checkpoint is complete
    with open(tmp_path / "killed.out", "w") as out:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None and not fs.glob(f"{bucket}/runs/*/checkpoints/step_{EVERY:08d}/MANIFEST.json"):
            time.sleep(0.5)
            fs.invalidate_cache()
        assert proc.poll() is None, (tmp_path / "killed.out").read_text()[-3000:]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        _stop_group(proc)
    [run] = fs.ls(f"{bucket}/runs", detail=False)
    uri = f"s3://{run}"
    assert fs.exists(f"{run}/checkpoints/step_{EVERY:08d}/trainer/.metadata") and fs.exists(f"{run}/trained.jsonl")
    assert not fs.exists(f"{run}/result.json") and not list(tmp_path.rglob("trained.jsonl"))  # no local run folder

    # resumed, and preempted with SIGTERM once it has trained a step (200 ms more per env step
    # leaves time to signal it before the last step; time changes nothing the job computes)
    staged = f"rlsvc-staging-*/{run.rsplit('/', 1)[-1]}"
    with open(tmp_path / "preempted.out", "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rlsvc.train", "--resume", uri, "env.step_latency_ms=200"],
            cwd=tmp_path,
            env=_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None and not _resumed_and_stepped(list(Path(tempfile.gettempdir()).glob(staged))):
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
        _stop_group(proc)
    text = (tmp_path / "preempted.out").read_text()
    assert code == 143, text[-3000:]
    fs.invalidate_cache()
    rewinds, steps = _ledger(fs.cat_file(f"{run}/trained.jsonl").decode())
    stopped = steps[-1]
    assert rewinds == 1
    assert EVERY < stopped < STEPS and f"SIGTERM: stopping after step {stopped}, with a checkpoint" in text
    assert fs.exists(f"{run}/checkpoints/step_{stopped:08d}/MANIFEST.json") and not fs.exists(f"{run}/result.json")

    resumed = subprocess.run(
        [sys.executable, "-m", "rlsvc.train", "--resume", uri], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=900
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming after step {stopped}" in resumed.stdout
    fs.invalidate_cache()
    result = json.loads(fs.cat_file(f"{run}/result.json"))
    assert result["run_dir"] == uri and result["checkpoint"] == f"{uri}/checkpoint"
    # the manifest is the commit marker: every checkpoint kept (the newest two) is complete
    from rlsvc.checkpoint import checkpoints, problem

    assert [c.rsplit("/", 1)[-1] for c in checkpoints(f"{uri}/checkpoints")] == [f"step_{STEPS:08d}", f"step_{stopped:08d}"]
    assert all(problem(c) is None for c in checkpoints(f"{uri}/checkpoints"))
    state = json.loads(fs.cat_file(f"{run}/checkpoints/step_{STEPS:08d}/state.json"))
    assert result["mlflow_run_id"] == state["mlflow_run_id"]

    # one MLflow run, steps 1..STEPS, and from the checkpoints on the same numbers as the reference
    got = _history(result["tracking_uri"], result["mlflow_run_id"])
    want = _history(ref_result["tracking_uri"], ref_result["mlflow_run_id"])
    assert sorted(got["return_mean"]) == list(range(1, STEPS + 1))
    for key in COMPARED:
        assert got[key] == want[key], key
    assert result["steps"] == ref_result["steps"] == STEPS
    assert result["eval"] == ref_result["eval"]
    from mlflow.tracking import MlflowClient

    run_info = MlflowClient(result["tracking_uri"]).get_run(result["mlflow_run_id"])
    tags = run_info.data.tags
    assert run_info.info.status == "FINISHED" and tags["rlsvc.run_dir"] == uri and tags["rlsvc.resumes"] == "2"
    assert tags["rlsvc.resume.1.from_step"] == str(EVERY) and tags["rlsvc.resume.2.from_step"] == str(stopped)
    assert tags["rlsvc.preempted_after_step"] == str(stopped) and tags["rlsvc.resume.2.steps_redone"] == "0"

    # the final weights are the same tensors
    from safetensors.torch import load, load_file

    a, b = load(fs.cat_file(f"{run}/checkpoint/model.safetensors")), load_file(str(Path(ref_result["checkpoint"]) / "model.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
