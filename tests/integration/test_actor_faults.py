"""Actors that die mid-job, killed with `ray.kill(..., no_restart=False)` as a crash or a lost node
would: env actors are restarted by Ray and the episodes they held come back as lost (their groups
are left out, never half-trained on); reward calls are repeated on the restarted actor; a reward
that is NaN fails only its group."""

from __future__ import annotations

import threading
import time

import pytest

from rlsvc.cluster.fleet import LostEpisode, RayEnvFleet
from rlsvc.cluster.placement import planned
from rlsvc.config import load_config
from rlsvc.episode import Episode

pytestmark = pytest.mark.integration
SESSIONS = 4


def _wait_alive(ray, actor, timeout_s: float = 120) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            ray.get(actor.node_id.remote(), timeout=30)
            return
        except ray.exceptions.RayActorError:
            time.sleep(0.5)
    pytest.fail("the actor did not come back")


@pytest.fixture
def env_fleet(ray_cluster):
    from rlsvc.cluster.actors import EnvWorker

    ray = ray_cluster
    cfg = load_config(
        None, ["env.num_actors=2", f"env.sessions_per_actor={SESSIONS}", "env.step_latency_ms=1500", "faults.max_actor_restarts=3"]
    )
    opts = planned(cfg)["env"].options()  # unnamed: other tests may hold rlsvc-env-*
    actors = [ray.remote(EnvWorker).options(**opts).remote(cfg.env) for _ in range(2)]  # 1.5 s per env step
    fleet = RayEnvFleet(actors, SESSIONS)
    yield ray, actors, fleet
    for a in actors:
        ray.kill(a, no_restart=True)


def _is_lost(values) -> list[bool]:
    return [isinstance(v, LostEpisode) for v in values]


def test_env_actor_killed_mid_step_loses_only_its_episodes_and_comes_back(env_fleet):
    ray, actors, fleet = env_fleet
    slots = list(range(2 * SESSIONS))
    assert not any(_is_lost(fleet.reset(slots, [100 + s for s in slots])))
    killer = threading.Timer(0.5, lambda: ray.kill(actors[0], no_restart=False))  # while its step sleeps
    killer.start()
    out = fleet.step(slots, ["stand"] * len(slots))
    killer.join()
    assert _is_lost(out) == [True] * SESSIONS + [False] * SESSIONS
    assert all(o.done and o.failed and o.outcome == "env_lost" for o in out[:SESSIONS])
    assert fleet.take_failures() == 1 and fleet.take_failures() == 0
    # the restarted actor (a new OpenEnv server and sessions) plays the next episodes
    again = fleet.reset(slots, [200 + s for s in slots])
    assert not any(_is_lost(again)) and all(not o.done for o in again)
    assert not any(_is_lost(fleet.step(slots, ["stand"] * len(slots))))


def test_episodes_begun_on_a_dead_env_actor_are_lost_on_its_successor(env_fleet):
    ray, actors, fleet = env_fleet
    slots = list(range(2 * SESSIONS))
    fleet.reset(slots, [300 + s for s in slots])
    ray.kill(actors[0], no_restart=False)  # between two calls: the next step reaches the new actor
    _wait_alive(ray, actors[0])
    out = fleet.step(slots, ["stand"] * len(slots))
    assert _is_lost(out) == [True] * SESSIONS + [False] * SESSIONS
    assert fleet.take_failures() == 1


def test_reward_calls_survive_a_restart_and_a_nan_reward_drops_only_its_group(ray_cluster):
    from rlsvc.cluster.actors import RewardWorker
    from rlsvc.cluster.groups import RewardClient
    from rlsvc.loop import score

    ray = ray_cluster
    cfg = load_config(None, [])
    reward = ray.remote(RewardWorker).options(**planned(cfg)["reward"].options()).remote(cfg.env)
    episodes = [Episode(group_id=g, policy_version=0, env_return=r) for g, r in ((0, 1.0), (0, -1.0), (1, float("nan")), (1, 1.0))]
    ray.kill(reward, no_restart=False)  # the call below goes to the restarted actor
    kept, dropped, errors = score(RewardClient(reward), episodes)
    assert [ep.reward for ep in kept] == [1.0, -1.0] and dropped == 1 and errors == 1
    assert episodes[2].failed and not episodes[3].failed  # the NaN one failed; its group went with it
    ray.kill(reward, no_restart=True)


def test_an_env_actor_call_that_raises_fails_only_its_episodes(ray_cluster):
    """An exception in a live env actor's call (not its death) escaped the fleet and failed the
    training step; now its episodes come back failed (their groups dropped, counted) and the
    other actors' episodes are unaffected. An actor that keeps raising still stops the job."""
    from rlsvc.cluster.fleet import EnvActorGone, EnvCallFailed

    class _FlakyEnvActor:
        """An env actor whose calls raise while `broken` (its pool or environment failed; the actor
        itself lives). Defined here: Ray's workers cannot import a test module."""

        def __init__(self) -> None:
            self.broken = False

        def set_broken(self, broken: bool) -> None:
            self.broken = broken

        def reset(self, sessions: list[int], seeds: list[int]) -> list[dict]:
            return [{"done": False, "reward": None} for _ in sessions]

        def step(self, sessions: list[int], actions: list[str]) -> list[dict]:
            if self.broken:
                raise RuntimeError("Server error: 'utf-8' codec can't encode character '\\ud800' (code: EXECUTION_ERROR)")
            return [{"done": True, "reward": 1.0} for _ in sessions]

    ray = ray_cluster
    actors = [ray.remote(_FlakyEnvActor).options(num_cpus=0).remote() for _ in range(2)]
    try:
        fleet = RayEnvFleet(actors, 2, max_consecutive_failures=2)
        ray.get(actors[0].set_broken.remote(True))
        out = fleet.step([0, 1, 2, 3], ["stand"] * 4)
        assert [isinstance(o, EnvCallFailed) for o in out] == [True, True, False, False]
        assert out[0].failed and out[0].done and "ud800" in out[0].error and out[2]["reward"] == 1.0
        assert fleet.take_failures() == 1
        with pytest.raises(EnvActorGone, match="2 calls in a row"):
            fleet.step([0, 2], ["stand", "stand"])
        ray.get(actors[0].set_broken.remote(False))
        assert all(o["done"] for o in fleet.step([0, 1, 2, 3], ["stand"] * 4))
    finally:
        for a in actors:
            ray.kill(a, no_restart=True)
