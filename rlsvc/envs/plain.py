"""Observations as plain data for the trip from an env actor to the driver.

An OpenEnv observation is a pydantic model whose class is built on OpenEnv's base types; Ray
pickles it by class, so every process that unpickles one imports OpenEnv first (and gradio and
FastMCP with it: about 6 CPU-seconds per process, of about 100 for a small job). The
driver only reads an observation's fields, so the env actor sends those: a `PlainObservation`
with the same attribute names and values. Failed observations (`FailedObservation` and its
subclasses) are rlsvc dataclasses and travel as they are.

Only an episode's final observation's `reward` is its return: the env actor warns once (in its log,
which Ray forwards to the driver) when an environment sets a reward on an observation that does
not end the episode, instead of dropping it silently.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

log = logging.getLogger(__name__)
_warned_early_reward = False


class PlainObservation(SimpleNamespace):
    """An environment's observation as its fields: `obs.player_sum`, `obs.done`, `obs.reward`
    read as on the pydantic object; `model_dump()` gives them as a dict, nested models as dicts
    too (as pydantic's would: transcripts are written as JSON)."""

    def model_dump(self) -> dict[str, Any]:
        return {k: _dump(v) for k, v in vars(self).items()}


def _dump(value: Any) -> Any:
    if hasattr(type(value), "model_fields"):
        return value.model_dump()
    if isinstance(value, list | tuple):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


def plain(observation: Any) -> Any:
    """A pydantic observation's top-level fields as a `PlainObservation` (field values as they
    are); anything else unchanged."""
    fields = getattr(type(observation), "model_fields", None)
    if fields is None:
        return observation
    return PlainObservation(**{name: getattr(observation, name) for name in fields})


def plain_all(observations: Sequence[Any]) -> list[Any]:
    """`plain` of each observation (what an env actor returns from reset and step)."""
    warn_early_rewards(observations)
    return [plain(o) for o in observations]


def warn_early_rewards(observations: Sequence[Any]) -> None:
    """Warn, once per process, about a non-zero reward on an observation that does not end its
    episode: the loop takes an episode's return from its final observation alone, so such a
    reward is not counted (an environment that earns rewards along the way reports their sum at
    the end)."""
    global _warned_early_reward
    if _warned_early_reward:
        return
    for obs in observations:
        reward = getattr(obs, "reward", None)
        if reward and not getattr(obs, "done", True):
            _warned_early_reward = True
            log.warning(
                "%s: reward %r on an observation that does not end its episode is not counted: only the final "
                "observation's reward is the episode's return (report the sum at the end; docs/tasks.md)",
                type(obs).__name__,
                reward,
            )
            return
