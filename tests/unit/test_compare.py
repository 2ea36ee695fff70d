"""`rlsvc.compare` and the reward curve on MLflow runs logged the way a job logs them (the
e2e tests run it on two real training runs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlsvc.tracking.mlflow_tracker import MlflowTracker
from rlsvc.tracking.plots import reward_curve


def _log_run(uri: str, name: str, kl: float, returns: list[float]) -> str:
    t = MlflowTracker(uri, "cmp-test", name)
    t.log_params({"grpo.kl_coef": kl, "run.seed": 0})
    for i, r in enumerate(returns, 1):
        t.log_metrics({"return_mean": r, "time/since_start_s": 10.0 * i}, step=i)
    t.log_metrics({"total_s": 10.0 * len(returns), "eval/mean_return": returns[-1]}, step=len(returns))
    t.finish()
    return t.run_id


def _compare(uri: str, experiment: str, *args: str) -> subprocess.CompletedProcess:
    """`python -m rlsvc.compare` on `experiment` at `uri`, as a user runs it."""
    cmd = [sys.executable, "-m", "rlsvc.compare", "--experiment", experiment, "--tracking-uri", uri, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_compare_prints_the_differences_and_writes_a_png(tmp_path: Path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _log_run(uri, "kl-0.2", 0.2, [-0.3, -0.2, -0.1])
    _log_run(uri, "kl-0.0", 0.0, [-0.3, -0.25])
    out = tmp_path / "cmp.png"
    res = _compare(uri, "cmp-test", "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert "grpo.kl_coef" in res.stdout and "run.seed" not in res.stdout  # only what differs
    assert "-0.1000" in res.stdout and "-0.2500" in res.stdout and "kl-0.2" in res.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    bad = _compare(uri, "nope")
    assert bad.returncode == 2 and "no experiment 'nope'" in bad.stderr and bad.stderr.count("\n") == 1


def test_reward_curve_png(tmp_path: Path):
    path = reward_curve([1, 2, 3], [-0.3, -0.2, -0.1], tmp_path / "c.png", "t", [2], [-0.15])
    assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 5_000


def test_system_metrics_are_sampled_into_the_run(tmp_path: Path):
    import time

    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    t = MlflowTracker(uri, "sys-test", "r", system_metrics_interval_s=0.5)
    time.sleep(2.0)
    t.finish()
    names = set(MlflowClient(uri).get_run(t.run_id).data.metrics)
    assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"} <= names, names


def test_plot_labels_prefer_algorithm_settings_over_where_and_how_long():
    from rlsvc.compare import telling_params

    diffs = ["eval.episodes", "grpo.kl_coef", "run.output_dir", "run.steps", "rollout.temperature", "tracking.tracking_uri"]
    assert telling_params(diffs) == ["grpo.kl_coef", "rollout.temperature"]
    assert telling_params(["eval.episodes", "run.output_dir"]) == ["eval.episodes"]


def test_blackjack_reference_lines_come_with_the_comparison(tmp_path: Path):
    """Runs of one BlackJack setting are plotted against the task's reference policies on their
    validation deals, with their greedy validation return; runs of different settings get none."""
    from mlflow.tracking import MlflowClient

    from rlsvc.compare import load_runs, reference_lines

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    params = {"env.type": "blackjack", "env.then_stick_at": None, "env.chat": False, "eval.val_episodes": 3000, "eval.val_seed": 7}
    for name in ("a", "b"):
        t = MlflowTracker(uri, "ref-test", name)
        t.log_params(params)
        for i in range(1, 21):
            t.log_metrics({"return_mean": -0.3 + 0.01 * i, "time/since_start_s": float(i)}, step=i)
            if i % 10 == 0:
                t.log_metrics({"eval/val_return": -0.2 + 0.005 * i}, step=i)
        t.finish()
    client = MlflowClient(uri)
    runs = load_runs(client, client.get_experiment_by_name("ref-test").experiment_id, 10)
    assert runs[0]["val_steps"] == [10, 20] and runs[0]["val_returns"] == pytest.approx([-0.15, -0.1])
    refs = reference_lines(runs)
    assert list(refs) == ["optimal", "stick at 17", "always stand"]
    assert refs["optimal"] > refs["stick at 17"] > refs["always stand"], refs
    out = tmp_path / "cmp.png"
    res = _compare(uri, "ref-test", "--out", str(out))
    assert res.returncode == 0 and out.stat().st_size > 10_000, res.stderr
    runs[1]["params"] = {**runs[1]["params"], "eval.val_seed": "8"}
    assert reference_lines(runs) == {}  # different deals: no common reference


def test_smoothed_is_a_trailing_mean():
    from rlsvc.tracking.plots import smoothed

    assert smoothed([1.0, 3.0, 5.0, 7.0], window=2) == [1.0, 2.0, 4.0, 6.0]
    assert smoothed([]) == []


def test_a_local_sqlite_store_keeps_its_artifacts_beside_the_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    store, elsewhere = tmp_path / "store", tmp_path / "cwd"
    store.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # MLflow's default would put them under the working directory's mlruns/
    t = MlflowTracker(f"sqlite:///{store / 'mlflow.db'}", "artifacts-test", "r")
    note = tmp_path / "note.txt"
    note.write_text("kept with its store")
    t.log_artifact(note)
    t.finish()
    (kept,) = store.glob("mlruns/**/note.txt")
    assert kept.read_text() == "kept with its store" and not (elsewhere / "mlruns").exists()


PLUGIN_WITH_REFERENCES = """
from rlsvc.task import Task


class Nim(Task):
    name = "nim"

    def __init__(self, stones, piles=1):  # no default for stones: rebuilt only with the logged options
        self.stones, self.piles = stones, piles

    def env_spec(self):
        raise AssertionError("not served here")

    def render(self, observation):
        return ""

    def parse(self, text):
        return None

    def reference_returns(self, episodes, seed):
        return {"optimal": self.stones / 100, "random": -self.piles / 10}
"""


def test_a_plugin_tasks_reference_lines_are_rebuilt_from_its_logged_options(tmp_path: Path, monkeypatch, capsys):
    """env.options is logged (one JSON param, as the job logs the config), so compare rebuilds a
    plug-in task with them; a task that cannot be rebuilt says why instead of vanishing."""
    from mlflow.tracking import MlflowClient

    from rlsvc.compare import load_runs, reference_lines
    from rlsvc.config import flatten, load_config

    (tmp_path / "nim_task.py").write_text(PLUGIN_WITH_REFERENCES)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load_config(None, ["env.task=nim_task:Nim", "env.options={stones: 11, piles: 2}", "eval.val_episodes=100"])
    params = flatten(cfg.model_dump(mode="json"))
    assert params["env.options"] == '{"piles": 2, "stones": 11}'
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    t = MlflowTracker(uri, "nim", "a")
    t.log_params(params)
    t.log_metrics({"return_mean": 0.1}, step=1)
    t.finish()
    client = MlflowClient(uri)
    runs = load_runs(client, client.get_experiment_by_name("nim").experiment_id, 10)
    assert reference_lines(runs) == {"optimal": 0.11, "random": -0.2}
    runs[0]["params"]["env.task"] = "nim_task:Gone"
    capsys.readouterr()
    assert reference_lines(runs) == {}
    assert capsys.readouterr().err == "rlsvc.compare: no reference lines: env.task: nim_task has no attribute Gone\n"
