"""The restart watch (rlsvc/cluster/restart_watch.py) without a cluster: Ray's restart counts of
the env, reward and buffer actors, read from fake actor states, become one report per restart
(the ones made before the first poll too), and a report that raises (a spent budget) kills that
actor for good and ends the watch."""

from __future__ import annotations

from types import SimpleNamespace

import ray

from rlsvc.cluster.restart_watch import RestartWatch, death_message
from rlsvc.config import FaultConfig
from rlsvc.job.faults import CrashLoop, FaultBudgets


def handle(actor_id: str) -> SimpleNamespace:
    return SimpleNamespace(_actor_id=SimpleNamespace(hex=lambda: actor_id))


def services() -> SimpleNamespace:
    return SimpleNamespace(envs=[handle("e0"), handle("e1")], reward=handle("r"), buffer=handle("b"))


def state(actor_id: str, restarts: int, cause: dict | None = None) -> SimpleNamespace:
    return SimpleNamespace(actor_id=actor_id, num_restarts=restarts, death_cause=cause)


def test_each_restart_is_reported_once_under_its_kind_and_name():
    reports: list[tuple[str, str]] = []
    watch = RestartWatch(services(), lambda kind, name, error: reports.append((kind, name)))
    watch.count([state("e0", 0), state("e1", 1), state("r", 2), state("b", 0), state("someone-else", 9)])
    watch.count([state("e0", 0), state("e1", 1), state("r", 3), state("b", 0)])
    assert reports == [("env", "rlsvc-env-1"), ("reward", "rlsvc-reward"), ("reward", "rlsvc-reward"), ("reward", "rlsvc-reward")]


def test_a_spent_budget_kills_the_crash_looping_actor_for_good(monkeypatch):
    killed: list[tuple[object, bool]] = []
    monkeypatch.setattr(ray, "kill", lambda actor, no_restart: killed.append((actor, no_restart)))
    svc = services()
    budgets = FaultBudgets.from_config(FaultConfig(max_actor_restarts=2))
    watch = RestartWatch(svc, budgets.failed)
    watch.count([state("r", 5, {"actor_died_error_context": {"error_message": "worker exited with code 1"}})])
    assert killed == [(svc.reward, True)]
    assert isinstance(watch.stopped, CrashLoop) and budgets.stopped is watch.stopped
    assert "rlsvc-reward (reward) failed 3 times in a row" in str(watch.stopped) and "worker exited with code 1" in str(watch.stopped)


def test_the_death_message_comes_from_rays_death_cause():
    assert death_message(state("r", 1, {"actor_died_error_context": {"error_message": "OOM"}})) == "OOM"
    assert death_message(state("r", 1)) == ""


def test_the_state_api_is_asked_at_this_jobs_cluster_address(monkeypatch):
    """Left to find the cluster itself, Ray's state API gives up wherever another Ray instance
    runs on the machine ("Found multiple active Ray instances"), and the watch would count no
    restart: it is given the job's own GCS address (the chaos injector too)."""
    import ray.util.state

    from rlsvc.cluster import chaos

    asked: list[object] = []
    monkeypatch.setattr(ray.util.state, "list_actors", lambda address=None, *a, **k: asked.append(address) or [])
    context = SimpleNamespace(gcs_address="127.0.0.1:6390", get_job_id=lambda: "02000000")
    monkeypatch.setattr(ray, "get_runtime_context", lambda: context)
    RestartWatch(services(), lambda *_: None).actor_states()
    chaos.live_rlsvc_actors("127.0.0.1:6391")
    assert asked == ["127.0.0.1:6390", "127.0.0.1:6391"]
