"""The asynchronous loop on real actors: rollouts run while the trainer steps, staleness stays
within `buffer.max_staleness`, k=0 runs the synchronous schedule without deadlock, and a rollout
worker that dies under the producer is recovered from the newest checkpoint."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def services(ray_cluster, tmp_path_factory):
    from rlsvc.config import load_config
    from rlsvc.job.model import prepare_model, setup_trainers
    from rlsvc.job.start import start_actors
    from rlsvc.tasks.registry import load_task

    cfg = load_config(
        None,
        [
            "grpo.groups_per_step=4",
            "grpo.group_size=4",
            "env.sessions_per_actor=16",
            "model.warm_start_steps=5",
            "rollout.asynchronous=true",
            "buffer.max_staleness=1",
            "grpo.tis_cap=2.0",
            "env.step_latency_ms=20",
            "grpo.kl_coef=0",
            "trainer.num_cpus=1",
            "rollout.num_cpus=1",
        ],
    )
    model, tokenizer, source = prepare_model(cfg)
    svc, codec = start_actors(cfg, load_task(cfg.env), tokenizer, source)  # as a job starts them
    setup_trainers(cfg, svc, model, codec.allowed_token_ids if cfg.rollout.constrained_actions else None)
    yield cfg, svc, codec, model
    svc.stop()


def run_steps(cfg, svc, codec, first_version: int, steps: int) -> list[dict]:
    from rlsvc.async_loop import AsyncGRPOLoop

    loop = AsyncGRPOLoop(cfg, svc, codec, version=first_version)
    loop.sync_weights()  # version `first_version` live before the producer starts
    try:
        return [loop.step(first_version + i)[0] for i in range(steps)]
    finally:
        loop.close()


def test_staleness_one_overlaps_and_stays_bounded(services):
    cfg, svc, codec, _ = services
    metrics = run_steps(cfg, svc, codec, first_version=0, steps=5)
    assert [m["policy_version"] for m in metrics] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert all(m["staleness_max"] <= 1 for m in metrics)
    # after the first batch the producer runs a version ahead: batch i was played by version i-1
    assert any(m["staleness_hist/1"] > 0 for m in metrics[1:])
    for m in metrics:
        for key in ("loss", "mismatch_kl", "tis_weight", "trainer_idle_frac", "rollout_idle_frac", "time/rollout_s"):
            assert math.isfinite(m[key]), key
        assert 0.0 <= m["trainer_idle_frac"] <= 1.0 and m["mismatch_kl"] >= -1e-6


def test_staleness_zero_is_synchronous_and_does_not_deadlock(services):
    cfg, svc, codec, _ = services
    sync_cfg = cfg.model_copy(update={"buffer": cfg.buffer.model_copy(update={"max_staleness": 0})})
    metrics = run_steps(sync_cfg, svc, codec, first_version=10, steps=3)
    assert [m["staleness_max"] for m in metrics] == [0.0, 0.0, 0.0]
    assert [m["behaviour_version"] for m in metrics] == [10.0, 11.0, 12.0]


def test_a_rollout_worker_lost_under_the_producer_is_recovered_from_the_checkpoint(services, tmp_path):
    """The producer meets the dead worker and `step` raises the loss (not a generic error, nor
    does it hang), so the job's recovery runs as for the synchronous loop: the producer stops, the worker is replaced,
    the checkpoint restored, and the next step starts a new producer from there."""
    import ray

    from rlsvc.async_loop import AsyncGRPOLoop
    from rlsvc.interfaces import ActorDied
    from rlsvc.job import setup_trainers
    from rlsvc.job.recovery import recover
    from rlsvc.job.training_checkpoint import save
    from rlsvc.rollout.runner import RolloutWorkerLost

    cfg, svc, codec, model = services
    loop = AsyncGRPOLoop(cfg, svc, codec, version=20)
    loop.sync_weights()
    try:
        loop.step(20)
        save(tmp_path, 21, loop, None, {"mlflow_run_id": "x", "tracking_uri": "x", "elapsed_s": 0.0, "config_hash": "x"}, keep=2)
        checksum = svc.trainer_group.parameter_checksum()
        old = svc.rollout[0]
        ray.kill(old, no_restart=True)
        # the producer's generate meets the dead worker (RolloutWorkerLost), or the step's weight
        # push does first (Ray's ActorDiedError): the job's recovery catches both
        with pytest.raises((RolloutWorkerLost, ActorDied)):
            for step in range(21, 25):  # the producer plays a batch ahead: it may have one in hand
                loop.step(step)
        step, _ = recover(loop, tmp_path, lambda: setup_trainers(cfg, svc, model, None))
        assert step == 21 and loop.version == 21 and loop.producer is None
        assert svc.rollout[0] is not old and svc.dead_policy_actors() == []
        assert svc.trainer_group.parameter_checksum() == checksum
        metrics = [loop.step(21 + i)[0] for i in range(2)]  # a new producer, from the checkpoint's version
        assert [m["policy_version"] for m in metrics] == [22.0, 23.0] and all(math.isfinite(m["loss"]) for m in metrics)
    finally:
        loop.close()
