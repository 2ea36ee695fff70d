"""EnvPool: OpenEnv's real server and WebSocket client, checked against the plain rules."""

from __future__ import annotations

import socket

import pytest

from rlsvc.envs.blackjack import HandView, seeded_game, stick_at

pytestmark = pytest.mark.integration

NUM_SESSIONS = 8


@pytest.fixture(scope="module")
def pool():
    from rlsvc.envs.openenv_pool import EnvPool

    with EnvPool(NUM_SESSIONS, call_timeout_s=30.0) as p:
        yield p


def _view(obs) -> HandView:
    return HandView(obs.player_sum, obs.dealer_card, obs.usable_ace)


def _play_through_pool(pool, seeds: list[int], policies: list) -> list[tuple[list, float]]:
    """Run one episode per session; returns (views seen, final reward) per session."""
    ids = list(range(len(seeds)))
    obs = pool.reset(ids, seeds)
    traces = [[_view(o)] for o in obs]
    rewards = [0.0] * len(ids)
    live = {i: o for i, o in zip(ids, obs, strict=True) if not o.done}
    while live:
        sids = list(live)
        new = pool.step(sids, [policies[i](live[i]) for i in sids])
        live = {}
        for i, o in zip(sids, new, strict=True):
            traces[i].append(_view(o))
            if o.done:
                rewards[i] = o.reward
                assert o.outcome == {1.0: "win", 0.0: "push", -1.0: "loss"}[o.reward]
            else:
                assert o.reward == 0.0 and o.outcome is None
                live[i] = o
    return list(zip(traces, rewards, strict=True))


def _play_plain(seed: int, policy) -> tuple[list, float]:
    game = seeded_game(seed)
    trace = [game.view()]
    while not game.done:
        game.step(policy(game.view()))
        trace.append(game.view())
    return trace, game.reward


def test_reset_observation(pool) -> None:
    (obs,) = pool.reset([0], [123])
    assert not obs.done and obs.reward is None and obs.outcome is None
    assert 4 <= obs.player_sum <= 21 and 1 <= obs.dealer_card <= 10


def test_pool_matches_plain_rules(pool) -> None:
    policies = [stick_at(t) for t in (12, 14, 15, 16, 17, 18, 19, 21)]
    for round_ in range(3):
        seeds = [1000 * round_ + i for i in range(NUM_SESSIONS)]
        got = _play_through_pool(pool, seeds, policies)
        want = [_play_plain(s, p) for s, p in zip(seeds, policies, strict=True)]
        assert got == want


def test_group_shares_the_deal(pool) -> None:
    seeds = [42] * NUM_SESSIONS
    obs = pool.reset(list(range(NUM_SESSIONS)), seeds)
    assert len({_view(o) for o in obs}) == 1
    # Same seed and same actions: identical episodes, whatever session they run in.
    results = _play_through_pool(pool, seeds, [stick_at(17)] * NUM_SESSIONS)
    assert all(r == results[0] for r in results)


def test_rejects_bad_batches(pool) -> None:
    with pytest.raises(ValueError):
        pool.reset([0, 0], [1, 2])
    with pytest.raises(IndexError):
        pool.step([NUM_SESSIONS], ["hit"])
    with pytest.raises(ValueError):
        pool.step([0, 1], ["hit"])


def test_close_frees_the_port() -> None:
    from rlsvc.envs.openenv_pool import EnvPool

    pool = EnvPool(2)
    port = pool.port
    pool.reset([0, 1], [5, 6])
    pool.close()
    pool.close()  # idempotent
    assert not pool._thread.is_alive()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
    with socket.socket() as sock:
        # SO_REUSEADDR: closed connections may linger in TIME_WAIT; only a listener would block.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen()
    with pytest.raises(RuntimeError):
        pool.reset([0], [1])


def test_an_invalid_observation_fails_only_its_episode():
    """A buggy environment (a real OpenEnv env behind the real server) sends an observation that
    does not parse: that session's episode ends failed and the others play on."""
    from rlsvc.envs.blackjack import BlackjackEnvironment, BlackjackObservation
    from rlsvc.envs.openenv_pool import EnvPool, InvalidObservation, blackjack_spec
    from rlsvc.task import EnvSpec

    class BuggyBlackjack(BlackjackEnvironment):
        def step(self, action, **kwargs):
            obs = super().step(action, **kwargs)
            if action.action == "hit":  # skips validation, as a bug might: player_sum is no number
                return BlackjackObservation.model_construct(**{**obs.model_dump(), "player_sum": "twelve-ish"})
            return obs

    base = blackjack_spec()
    spec = EnvSpec("buggy_blackjack", BuggyBlackjack, base.action_cls, BlackjackObservation, base.state_cls, base.payload)
    with EnvPool(2, spec=spec, call_timeout_s=30.0) as buggy:
        buggy.reset([0, 1], [7, 8])
        hit, stand = buggy.step([0, 1], ["hit", "stand"])
        assert isinstance(hit, InvalidObservation) and hit.done and hit.failed and "player_sum" in hit.error
        assert not isinstance(stand, InvalidObservation) and stand.done and stand.outcome in ("win", "push", "loss")
        assert all(not o.done for o in buggy.reset([0, 1], [9, 10]))  # the session is usable again


def test_a_dropped_connection_fails_only_its_episode(pool) -> None:
    """A session whose connection breaks (here: reset under it) ends its own episode as lost;
    the others play on, and the next reset of the slot reconnects it."""
    from rlsvc.envs.openenv_pool import LostObservation

    ids = [0, 1, 2]
    pool.reset(ids, [21, 22, 23])
    before = pool.stats()
    pool._clients[1]._ws.transport.abort()
    obs = pool.step(ids, ["stand"] * 3)
    assert isinstance(obs[1], LostObservation) and obs[1].done and obs[1].failed and obs[1].outcome == "env_lost"
    assert all(o.done and o.outcome in ("win", "push", "loss") for o in (obs[0], obs[2]))
    (again,) = pool.step([1], ["hit"])  # still broken: lost at once, no message sent
    assert isinstance(again, LostObservation)
    assert all(not o.done for o in pool.reset(ids, [24, 25, 26]))
    after = pool.stats()
    assert after["sessions_lost"] - before["sessions_lost"] == 1 and after["reconnects"] - before["reconnects"] == 1
    assert after["env_lost"] - before["env_lost"] == 2 and after["open_sessions"] == NUM_SESSIONS


def test_a_silent_session_is_dropped_and_reconnected() -> None:
    """A session with no reply within call_timeout_s comes back lost (its late reply would be
    taken for its next message's); the server still holds it until its step ends, so the reset
    waits for room, then reconnects."""
    import asyncio

    from rlsvc.envs.blackjack import BlackjackEnvironment
    from rlsvc.envs.openenv_pool import EnvPool, LostObservation, blackjack_spec
    from rlsvc.task import EnvSpec

    class SlowHit(BlackjackEnvironment):
        async def step_async(self, action, timeout_s=None, **kwargs):
            if action.action == "hit":
                await asyncio.sleep(2.5)
            return self.step(action)

    base = blackjack_spec()
    spec = EnvSpec("slow_blackjack", SlowHit, base.action_cls, base.observation_cls, base.state_cls, base.payload)
    with EnvPool(2, spec=spec, call_timeout_s=1.0, backoff_s=0.2) as slow:
        slow.reset([0, 1], [7, 8])
        hit, stand = slow.step([0, 1], ["hit", "stand"])
        assert isinstance(hit, LostObservation) and "no reply" in hit.error
        assert stand.done and stand.outcome in ("win", "push", "loss")
        assert all(not o.done for o in slow.reset([0, 1], [9, 10]))
        assert slow.stats()["reconnects"] == 1 and slow.stats()["open_sessions"] == 2


def test_a_server_error_fails_only_its_episode():
    """An environment that raises, or whose observation cannot be encoded (a lone surrogate), gets
    an error reply from OpenEnv's server; OpenEnv's client raises on it, which failed the whole
    batched call (every episode in it, and the training step). Now only that episode fails, and
    is counted (issue 56)."""
    from rlsvc.envs.blackjack import BlackjackEnvironment, BlackjackObservation
    from rlsvc.envs.openenv_pool import EnvPool, EnvSpec, ServerErrorObservation, blackjack_spec

    class FailingBlackjack(BlackjackEnvironment):
        def step(self, action, **kwargs):
            obs = super().step(action, **kwargs)
            if action.action == "hit":
                raise ValueError("the environment's own bug")
            return obs

    class UnencodableBlackjack(BlackjackEnvironment):
        def step(self, action, **kwargs):
            obs = super().step(action, **kwargs)
            if action.action == "hit":  # a lone surrogate: no UTF-8 encoder takes it
                return BlackjackObservation.model_construct(**{**obs.model_dump(), "outcome": "\ud800"})
            return obs

    base = blackjack_spec()
    for env, why in ((FailingBlackjack, "the environment's own bug"), (UnencodableBlackjack, "surrogate")):
        spec = EnvSpec("failing", env, base.action_cls, BlackjackObservation, base.state_cls, base.payload)
        with EnvPool(3, spec=spec, call_timeout_s=30.0) as pool:
            pool.reset([0, 1, 2], [7, 8, 9])
            out = pool.step([0, 1, 2], ["hit", "stand", "stand"])
            assert [isinstance(o, ServerErrorObservation) for o in out] == [True, False, False]
            assert out[0].failed and out[0].done and why in out[0].error, out[0].error
            assert out[1].done and out[1].outcome in ("win", "push", "loss") and not getattr(out[1], "failed", False)
            assert pool.stats()["env_errors"] == 1
            assert all(not o.done for o in pool.reset([0, 1, 2], [10, 11, 12]))  # the sessions play on
