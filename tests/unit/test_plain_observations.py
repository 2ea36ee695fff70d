"""An environment that rewards an observation before the episode ends is told, once, that only
the final observation's reward counts (issue 55, trap 6: such rewards were dropped silently)."""

from __future__ import annotations

import logging

import pytest

from rlsvc.envs import plain
from rlsvc.envs.plain import PlainObservation, plain_all

pytestmark = pytest.mark.unit


def test_an_early_reward_is_warned_about_once(monkeypatch, caplog):
    monkeypatch.setattr(plain, "_warned_early_reward", False)
    caplog.set_level(logging.WARNING, logger="rlsvc.envs.plain")
    quiet = [PlainObservation(done=False, reward=None), PlainObservation(done=False, reward=0.0), PlainObservation(done=True, reward=1.0)]
    plain_all(quiet)
    assert not caplog.records  # no reward before the end, or only the final one: nothing to say
    early = PlainObservation(done=False, reward=0.5)
    assert plain_all([early])[0] is early  # still passed on as it is
    plain_all([PlainObservation(done=False, reward=-1.0)])
    assert len(caplog.records) == 1
    assert "reward 0.5 on an observation that does not end its episode is not counted" in caplog.records[0].getMessage()
