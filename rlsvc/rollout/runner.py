"""The multi-turn rollout loop: generate the next decision for every live episode in one batched
call, apply the parsed actions in the environments, repeat until every episode has ended.

It depends only on two small interfaces, so it runs the same over Ray actor handles (see
`rlsvc.cluster.fleet`) and over plain in-process objects in tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlsvc.buffer.replay import Episode


class Generator(Protocol):
    def generate(self, prompts: list[list[int]], seeds: list[int]) -> list[dict]:
        """One result per prompt: {"token_ids": [...], "logprobs": [...], "text": str}."""
        ...


class EnvFleet(Protocol):
    num_slots: int

    def reset(self, slots: list[int], seeds: list[int]) -> list[Any]: ...

    def step(self, slots: list[int], actions: list[str]) -> list[Any]: ...


@dataclass
class PromptCodec:
    """Observation -> prompt token ids, and sampled text -> action ("hit"/"stand"/None)."""

    encode: Callable[[Any], list[int]]
    parse: Callable[[str], str | None]


def _outcome(obs: Any) -> str | None:
    outcome = getattr(obs, "outcome", None)
    if outcome is None:
        outcome = (getattr(obs, "metadata", None) or {}).get("outcome")
    return outcome


def _obs_dict(obs: Any) -> dict[str, Any]:
    return {k: getattr(obs, k) for k in ("player_sum", "dealer_card", "usable_ace")}


@dataclass
class RolloutRunner:
    generator: Generator
    fleet: EnvFleet
    codec: PromptCodec
    max_turns: int = 12
    # seconds the last `collect` spent waiting on the generator and on the environments; the
    # rest of its wall time is this loop's own work (prompt encoding, parsing, bookkeeping)
    last_timing: dict[str, float] = field(default_factory=dict)

    def collect(self, group_seeds: Sequence[tuple[int, int]], group_size: int, version: int, sample_seed: int) -> list[Episode]:
        """Play `group_size` episodes from each (group_id, deal_seed); all of a group share the deal."""
        jobs = [(gid, seed) for gid, seed in group_seeds for _ in range(group_size)]
        episodes: list[Episode] = []
        self._timing = {"generate_s": 0.0, "env_s": 0.0}
        for start in range(0, len(jobs), self.fleet.num_slots):
            wave = jobs[start : start + self.fleet.num_slots]
            episodes += self._play_wave(wave, version, sample_seed + start)
        self.last_timing = self._timing
        return episodes

    def _timed(self, phase: str, fn: Callable[..., list[Any]], *args: Any) -> list[Any]:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self._timing[phase] += time.perf_counter() - t0

    def _play_wave(self, wave: list[tuple[int, int]], version: int, sample_seed: int) -> list[Episode]:
        episodes = [Episode(group_id=gid, policy_version=version) for gid, _ in wave]
        slots = list(range(len(wave)))
        obs = dict(zip(slots, self._timed("env_s", self.fleet.reset, slots, [seed for _, seed in wave])))
        live = [s for s in slots if not obs[s].done]
        for s in slots:
            if obs[s].done:  # defensive: BlackJack never ends at reset, other envs may
                self._finish(episodes[s], obs[s])
        for turn in range(self.max_turns):
            if not live:
                break
            prompts = [self.codec.encode(obs[s]) for s in live]
            observe = getattr(self.codec, "observe", _obs_dict)
            seeds = [sample_seed * 1009 + turn * 100_003 + s for s in live]
            outs = self._timed("generate_s", self.generator.generate, prompts, seeds)
            to_step, actions = [], []
            for s, prompt, out in zip(live, prompts, outs):
                ep = episodes[s]
                ep.prompts.append(prompt)
                ep.responses.append(list(out["token_ids"]))
                ep.logprobs.append(list(out["logprobs"]))
                ep.texts.append(out["text"])
                ep.observations.append(observe(obs[s]))
                action = self.codec.parse(out["text"])
                if action is None:
                    ep.invalid, ep.outcome = True, "invalid"
                else:
                    to_step.append(s)
                    actions.append(action)
            new_obs = self._timed("env_s", self.fleet.step, to_step, actions) if to_step else []
            live = []
            for s, o in zip(to_step, new_obs):
                obs[s] = o
                if o.done:
                    self._finish(episodes[s], o)
                else:
                    live.append(s)
        for s in live:
            episodes[s].outcome = "truncated"
        return episodes

    @staticmethod
    def _finish(ep: Episode, obs: Any) -> None:
        ep.env_return = float(obs.reward or 0.0)
        ep.failed = bool(getattr(obs, "failed", False))
        ep.outcome = _outcome(obs) or ("win" if ep.env_return > 0 else "loss" if ep.env_return < 0 else "push")
