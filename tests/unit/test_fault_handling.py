"""Bad input that must not stop (or silently poison) a job: reward functions that raise or return
NaN, and steps with a non-finite loss, which are counted and stop the job past a limit."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlsvc.cluster.actors import with_env
from rlsvc.cluster.placement import GOMP_SPINCOUNT, plan, planned, share_cores
from rlsvc.config import load_config
from rlsvc.episode import Episode
from rlsvc.loop import NonFiniteGuard, TooManyNonFiniteSteps
from rlsvc.rewards.rubric import Rubric


def _raises(ep: Episode) -> float:
    if ep.group_id == 1:
        raise KeyError("no such field")
    return 1.0


def test_a_reward_function_that_raises_or_returns_nan_fails_only_that_episode():
    rubric = Rubric([("r", 1.0, _raises), ("nan_for_group_2", 1.0, lambda ep: math.nan if ep.group_id == 2 else 0.5)])
    episodes = [Episode(group_id=g, policy_version=0) for g in (0, 1, 2, 0)]
    assert rubric.score_all(episodes) == [1.5, None, None, 1.5]


def test_nonfinite_steps_are_counted_and_stop_the_job_at_the_limit():
    guard = NonFiniteGuard(limit=2)
    guard.observe({"nonfinite_skipped": 0.0, "loss": 0.1})
    guard.observe({"nonfinite_skipped": 1.0, "loss": math.nan})
    assert guard.skipped == 1
    with pytest.raises(TooManyNonFiniteSteps, match=r"2 steps had a non-finite loss.*max_nonfinite_steps=2"):
        guard.observe({"nonfinite_skipped": 1.0})


def test_env_reward_and_buffer_actors_are_restarted_by_ray_without_limit_and_policy_actors_are_not():
    """Ray restarts them every time; the job's fault budget (faults.max_actor_restarts, in a row)
    is what stops a crash loop, so a lifetime limit in Ray would only stop long jobs."""
    cfg = load_config(None, ["faults.max_actor_restarts=7"])
    opts = {role: p.options(0) for role, p in planned(cfg).items()}
    assert opts["env"]["max_restarts"] == -1 and opts["env"]["max_task_retries"] == 0  # lost sessions are reported, not replayed
    assert opts["reward"]["max_restarts"] == opts["buffer"]["max_restarts"] == -1
    assert opts["reward"]["max_task_retries"] == opts["buffer"]["max_task_retries"] == -1  # scoring is safe to repeat
    assert all("max_restarts" not in opts[r] for r in ("rollout", "trainer", "reference"))


def test_the_ledger_replayed_drops_rewound_steps(tmp_path):
    """trained.jsonl: a rewind to a checkpoint undoes the steps after it; what is left has every
    step once and no group twice."""
    import json

    from rlsvc.job.training_checkpoint import replay_ledger

    records = [
        {"step": 1, "groups": [0, 1]},
        {"step": 2, "groups": [2, 3]},
        {"step": 3, "groups": [4, 5]},
        {"rewind_to": 1},
        {"step": 2, "groups": [2, 3]},
        {"step": 3, "groups": [4, 5]},
        {"step": 4, "groups": [6, 7]},
    ]
    ledger = tmp_path / "trained.jsonl"
    ledger.write_text("".join(json.dumps(r) + "\n" for r in records))
    steps = replay_ledger(ledger)
    assert sorted(steps) == [1, 2, 3, 4]
    groups = [g for gs in steps.values() for g in gs]
    assert len(groups) == len(set(groups)) == 8


def test_chaos_refuses_bad_arguments_in_one_line():
    out = subprocess.run(
        [sys.executable, "-m", "rlsvc.chaos", "--address", "127.0.0.1:1", "--every", "0"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and out.stderr.strip() == "rlsvc.chaos: --every and --duration must be > 0"


def test_policy_threads_spin_before_sleeping_in_the_synchronous_loop_only():
    """The policy's passes (trainer, reference, the rollout workers' vLLM) are many small parallel
    regions: their OpenMP threads spin briefly (GOMP_SPINCOUNT wins over OMP_WAIT_POLICY); every
    other actor's sleep at once, and so do all of them in the asynchronous loop, where rollouts
    and training run on the same cores meanwhile."""
    env = {role: p.options(0)["runtime_env"]["env_vars"] for role, p in planned(load_config(None, [])).items()}
    assert env == {role: p.worker_env() for role, p in planned(load_config(None, [])).items()}
    assert env["trainer"]["GOMP_SPINCOUNT"] == env["reference"]["GOMP_SPINCOUNT"] == env["rollout"]["GOMP_SPINCOUNT"] == GOMP_SPINCOUNT
    assert all("GOMP_SPINCOUNT" not in e for r, e in env.items() if r not in ("trainer", "reference", "rollout"))
    overlapped = planned(load_config(None, ["rollout.asynchronous=true", "buffer.max_staleness=1"]))
    assert all("GOMP_SPINCOUNT" not in p.options(0)["runtime_env"]["env_vars"] for p in overlapped.values())


def test_an_actor_that_sets_gomp_spincount_after_openmp_loaded_says_so():
    """libgomp reads GOMP_SPINCOUNT once, as it loads: `openmp_loaded` sees whether it has, and
    `with_env` says on stderr when the spin it sets comes too late."""
    script = (
        "import sys\n"
        "from rlsvc.cluster.actors import openmp_loaded, with_env\n"
        "before = openmp_loaded()\n"
        "import torch\n"
        "print(before, openmp_loaded())\n"
        "class Probe:\n    pass\n"
        "with_env(Probe, {'GOMP_SPINCOUNT': '30000', 'OMP_NUM_THREADS': '1'})()\n"
        "with_env(Probe, {'OMP_NUM_THREADS': '1'})()\n"
    )
    # vLLM, imported in this test process by earlier tests, puts torch's libgomp in LD_PRELOAD for
    # the processes started after it: a process started so has OpenMP loaded from its first line
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True"]
    assert out.stderr.count("Probe: OpenMP started before the actor's constructor; GOMP_SPINCOUNT not applied") == 1
    import torch

    libgomp = next(Path(torch.__file__).parent.glob("lib/libgomp*.so*"))
    preloaded = subprocess.run(
        [sys.executable, "-c", "from rlsvc.cluster.actors import openmp_loaded; print(openmp_loaded())"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "LD_PRELOAD": str(libgomp)},
    )
    assert preloaded.stdout.split() == ["True"], preloaded.stderr[-2000:]


def test_on_the_local_cluster_a_job_starts_actors_that_do_not_spin_set_their_env_themselves(monkeypatch):
    """A runtime env makes Ray start an actor's worker through a set-up process. On the cluster a
    job starts itself (no address), whose processes inherit the driver's WORKER_ENV, the actors
    that need no GOMP_SPINCOUNT from their first instruction set their env in their constructor
    (`with_env`): the same variables, the same class name for Ray. So does the rollout worker,
    whose start is the job's longest, though it spins: its constructor runs before OpenMP loads."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    labels = {"CPU": 8.0, "rlsvc_gpu_node": 1.0, "rlsvc_cpu_node": 1.0}
    local = plan(load_config(None, []), labels, 1)
    assert {r for r, p in local.items() if p.env_in_process} == {"rollout", "env", "reward", "buffer"}
    assert all(("runtime_env" in p.options(0)) != p.env_in_process for p in local.values())
    joined = plan(load_config(None, ["cluster.address=127.0.0.1:6379"]), labels, 1)
    assert all(p.options(0)["runtime_env"]["env_vars"] == p.worker_env() for p in joined.values())

    class Probe:
        def __init__(self, key: str) -> None:
            self.seen = os.environ.get(key)

    env = {**local["env"].worker_env(), "RLSVC_PROBE": "set"}
    for key in env:  # restored after the test
        monkeypatch.setenv(key, os.environ.get(key, ""))
    threads: list[int] = []  # not torch's own: an in-process vLLM engine replaces it with a no-op
    monkeypatch.setattr(torch, "set_num_threads", threads.append)
    cls = with_env(Probe, env)
    assert (cls.__name__, cls.__qualname__) == ("Probe", Probe.__qualname__)
    assert cls("RLSVC_PROBE").seen == "set" and threads == [int(env["OMP_NUM_THREADS"])]


def test_asynchronous_rollout_workers_and_trainer_ranks_split_the_cores_of_the_jobs_own_cluster(monkeypatch):
    """In the asynchronous loop the rollout workers and trainer ranks compute at the same time:
    on the machine a job's own cluster runs on, their threads add up to its cores (the
    reference runs the trainer's count); the synchronous loop, whose phases take turns, and a
    joined cluster keep the CPUs each actor reserves."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    labels = {"CPU": 8.0, "rlsvc_gpu_node": 1.0, "rlsvc_cpu_node": 1.0}
    overlapped = ["rollout.asynchronous=true", "buffer.max_staleness=1"]
    threads = {r: int(p.worker_env()["OMP_NUM_THREADS"]) for r, p in planned(load_config(None, overlapped)).items()}
    assert threads["rollout"] == threads["trainer"] == threads["reference"] == 2  # the default reservation
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    local = plan(load_config(None, overlapped), labels, 1)
    assert {r: int(p.worker_env()["OMP_NUM_THREADS"]) for r, p in local.items()} == {**threads, "rollout": 1, "trainer": 1, "reference": 1}
    assert plan(load_config(None, []), labels, 1)["rollout"].worker_env()["OMP_NUM_THREADS"] == "2"
    joined = plan(load_config(None, [*overlapped, "cluster.address=127.0.0.1:6379"]), labels, 1)
    assert joined["rollout"].worker_env()["OMP_NUM_THREADS"] == "2"
    # more cores than the actors reserve: each keeps its reservation; more actors than cores: one each
    wide = planned(load_config(None, [*overlapped, "rollout.num_workers=2"]))
    assert {r: p.worker_threads for r, p in share_cores(wide, 16).items() if r in ("rollout", "trainer")} == {"rollout": 2, "trainer": 2}
    assert {r: p.worker_threads for r, p in share_cores(wide, 2).items() if r in ("rollout", "trainer")} == {"rollout": 1, "trainer": 1}


def test_the_reference_lives_in_trainer_rank_0_in_the_synchronous_loop_and_in_its_own_actor_when_asked_or_asynchronous():
    from rlsvc.cluster.placement import reference_host

    cases = {
        (): "rank0",
        ("rollout.asynchronous=true", "buffer.max_staleness=1"): "actor",
        ("trainer.reference_actor=true",): "actor",
        ("trainer.reference_actor=false", "rollout.asynchronous=true", "buffer.max_staleness=1"): "rank0",
        ("grpo.kl_coef=0",): None,
    }
    for overrides, host in cases.items():
        cfg = load_config(None, list(overrides))
        assert reference_host(cfg) == host, overrides
        assert planned(cfg)["reference"].count == (1 if host == "actor" else 0), overrides
