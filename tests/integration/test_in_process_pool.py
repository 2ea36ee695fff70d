"""InProcessPool: the same OpenEnv environments as EnvPool, called in the actor's process. Same
episodes as the WebSocket pool and the plain rules; a raising environment fails only its episode;
blocking environments (the code interpreter) run their sessions concurrently."""

from __future__ import annotations

import time

import pytest

from rlsvc.envs.blackjack import stick_at

pytestmark = pytest.mark.integration


def _play(pool, seeds: list[int]) -> list[tuple]:
    """Every session plays stick-at-17 from its seed; (observations as tuples, reward) each."""
    policy = stick_at(17)
    ids = list(range(len(seeds)))
    obs = pool.reset(ids, seeds)
    traces = [[(o.player_sum, o.dealer_card, o.usable_ace, o.done)] for o in obs]
    live = {i: o for i, o in zip(ids, obs) if not o.done}
    while live:
        sids = list(live)
        new = pool.step(sids, [policy(live[i]) for i in sids])
        live = {}
        for i, o in zip(sids, new):
            traces[i].append((o.player_sum, o.dealer_card, o.usable_ace, o.done, o.reward, o.outcome))
            if not o.done:
                live[i] = o
    return traces


def test_same_episodes_as_the_websocket_pool():
    from rlsvc.envs.in_process import InProcessPool
    from rlsvc.envs.openenv_pool import EnvPool

    seeds = list(range(100, 132))
    with InProcessPool(32) as local, EnvPool(32, call_timeout_s=30.0) as remote:
        assert _play(local, seeds) == _play(remote, seeds)
        assert local.stats()["env_errors"] == 0 and local.stats()["open_sessions"] == 32


def test_a_raising_environment_fails_only_its_episode():
    from rlsvc.envs.blackjack import BlackjackEnvironment
    from rlsvc.envs.in_process import EnvErrorObservation, InProcessPool
    from rlsvc.envs.openenv_pool import blackjack_spec
    from rlsvc.task import EnvSpec

    class Broken(BlackjackEnvironment):
        def step(self, action, **kwargs):
            if action.action == "hit":
                raise ValueError("deck on fire")
            return super().step(action, **kwargs)

    base = blackjack_spec()
    spec = EnvSpec("broken", Broken, base.action_cls, base.observation_cls, base.state_cls, base.payload)
    with InProcessPool(2, spec=spec) as pool:
        pool.reset([0, 1], [7, 8])
        hit, stand = pool.step([0, 1], ["hit", "stand"])
        assert isinstance(hit, EnvErrorObservation) and hit.done and hit.failed and "deck on fire" in hit.error
        assert hit.outcome == "env_error" and stand.done and not getattr(stand, "failed", False)
        with pytest.raises(Exception, match="validation error"):  # an action the schema refuses is the caller's bug
            base.action_cls(**base.payload("fold"))
        bad = pool.step([0], ["fold"])[0]  # ...and inside the pool it fails that session only
        assert isinstance(bad, EnvErrorObservation) and pool.stats()["env_errors"] == 2
        assert all(not o.done for o in pool.reset([0, 1], [9, 10]))
    with pytest.raises(RuntimeError, match="closed"):
        pool.reset([0], [1])


def test_blocking_environments_step_concurrently_and_latency_is_paid_once_per_call():
    from rlsvc.envs.code_interpreter import CodeEnvSettings
    from rlsvc.envs.in_process import InProcessPool
    from rlsvc.envs.openenv_pool import code_spec

    with InProcessPool(4, spec=code_spec(CodeEnvSettings(backend="local", max_turns=3, exec_timeout_s=5))) as pool:
        pool.reset(list(range(4)), [1, 2, 3, 4])
        code = "import time; print(time.time()); time.sleep(1.0); print(time.time())"
        out = pool.step(list(range(4)), [("code", code)] * 4)
        spans = [tuple(map(float, o.stdout.split())) for o in out]
        assert max(start for start, _ in spans) < min(end for _, end in spans), f"the runs did not overlap: {spans}"
    with InProcessPool(8, step_latency_s=1.0) as pool:  # one simulated round trip per call, not per session
        pool.reset(list(range(8)), list(range(8)))
        t0 = time.perf_counter()
        pool.step(list(range(8)), ["stand"] * 8)
        assert 1.0 <= time.perf_counter() - t0 < 4.0
