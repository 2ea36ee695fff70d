"""The multi-turn rollout loop's bookkeeping, with the plain BlackJack rules as the fleet and a
scripted answer function as the generator (the real ones are covered by integration tests)."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import RulesFleet

from rlsvc.models.tokenizer import build_tokenizer
from rlsvc.policy_io import TaskCodec
from rlsvc.rollout.runner import RolloutRunner
from rlsvc.tasks.blackjack import BlackjackTask


class Scripted:
    """Answers by reading the sum back from the prompt ids: HIT below 17, garbage at exactly 13."""

    def __init__(self, codec: TaskCodec) -> None:
        self.codec = codec
        self.tok = codec.tokenizer

    def generate(self, prompts, seeds):
        out = []
        for p in prompts:
            total = int(self.tok.convert_ids_to_tokens(p[2]))
            text = "7" if total == 13 else "HIT" if total < 17 else "STAND"
            out.append({"token_ids": [self.tok.convert_tokens_to_ids(text)], "logprobs": [-0.5], "text": text})
        return out


def test_runner_plays_groups_to_the_end():
    codec = TaskCodec(BlackjackTask(), build_tokenizer())
    runner = RolloutRunner(Scripted(codec), RulesFleet(num_slots=10), codec, max_turns=12)
    groups = [(g, 1000 + g) for g in range(8)]
    eps = runner.collect(groups, group_size=3, version=5, sample_seed=0)
    assert len(eps) == 24 and all(e.policy_version == 5 for e in eps)  # 24 episodes over waves of 10 slots
    for e in eps:
        assert e.outcome in {"win", "push", "loss", "invalid"}
        assert len(e.prompts) == len(e.responses) == len(e.logprobs) == len(e.observations)
        if e.outcome == "invalid":
            assert e.invalid and e.observations[-1]["player_sum"] == 13 and e.texts[-1] == "7"
        else:
            assert e.env_return in (-1.0, 0.0, 1.0)
    for g in range(8):  # deterministic answers + a shared deal: a group's episodes are identical
        group = [e for e in eps if e.group_id == g]
        assert len({(e.env_return, e.outcome, len(e.prompts)) for e in group}) == 1


def test_runner_truncates_at_max_turns():
    codec = TaskCodec(BlackjackTask(), build_tokenizer())

    class AlwaysStandLater(Scripted):
        def generate(self, prompts, seeds):
            return [{"token_ids": [0], "logprobs": [0.0], "text": "HIT"} for _ in prompts]

    runner = RolloutRunner(AlwaysStandLater(codec), RulesFleet(4), codec, max_turns=1)
    eps = runner.collect([(0, 4), (1, 5)], group_size=2, version=0, sample_seed=0)
    assert {e.outcome for e in eps} <= {"truncated", "loss"}
    assert all(len(e.prompts) == 1 for e in eps)


class SeededRandom(Scripted):
    """Answers HIT/STAND at random from the request's seed, and records each call's batch size."""

    def __init__(self, codec: TaskCodec) -> None:
        super().__init__(codec)
        self.batch_sizes: list[int] = []

    def generate(self, prompts, seeds):
        import random

        self.batch_sizes.append(len(prompts))
        texts = ["HIT" if random.Random(s).random() < 0.6 else "STAND" for s in seeds]
        return [{"token_ids": [self.tok.convert_tokens_to_ids(t)], "logprobs": [-0.7], "text": t} for t in texts]


def _played(num_slots: int) -> tuple[list, list[int]]:
    codec = TaskCodec(BlackjackTask(), build_tokenizer())
    gen = SeededRandom(codec)
    runner = RolloutRunner(gen, RulesFleet(num_slots), codec, max_turns=12)
    eps = runner.collect([(g, 7000 + g) for g in range(16)], group_size=4, version=0, sample_seed=3)
    return [(e.group_id, e.texts, e.env_return, e.outcome) for e in eps], gen.batch_sizes


def test_ended_episodes_free_their_slot_for_the_next_one():
    """64 episodes over 10 slots: every generate call is full while episodes wait to start, and
    the episodes (seeded per job and turn) are the same whatever the number of slots."""
    few, sizes = _played(10)
    many, _ = _played(64)
    assert few == many
    decisions = sum(len(texts) for _, texts, _, _ in few)
    assert decisions == 97 and sizes == [10] * 9 + [5, 2]  # full until the queue is empty
    # (waves of 10 slots would make 7 waves of up to 4 turns each, every turn a call)


class SlowFleet(RulesFleet):
    """RulesFleet whose steps take `latency_s`, recording how many steps were in flight at once."""

    def __init__(self, num_slots: int, latency_s: float) -> None:
        super().__init__(num_slots)
        self.latency_s = latency_s
        self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()

    def step(self, slots, actions):
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(self.latency_s)
        try:
            return super().step(slots, actions)
        finally:
            with self.lock:
                self.in_flight -= 1


class GenerateWhileStepping(SeededRandom):
    """Counts generate calls made while some group's env step was in flight."""

    def __init__(self, codec: TaskCodec, fleet: SlowFleet) -> None:
        super().__init__(codec)
        self.fleet = fleet
        self.overlapped = 0

    def generate(self, prompts, seeds):
        self.overlapped += self.fleet.in_flight > 0
        return super().generate(prompts, seeds)


def test_slot_groups_overlap_generation_with_env_steps_and_play_the_same_episodes():
    """Two slot groups: one group's generate call runs while the other's env step waits, and the
    episodes (seeded per episode and turn) equal those of one group."""
    codec = TaskCodec(BlackjackTask(), build_tokenizer())
    played = {}
    for k in (1, 2, 3):
        fleet = SlowFleet(12, latency_s=0.02)
        gen = GenerateWhileStepping(codec, fleet)
        runner = RolloutRunner(gen, fleet, codec, max_turns=12, slot_groups=k)
        eps = runner.collect([(g, 7000 + g) for g in range(16)], group_size=4, version=0, sample_seed=3)
        played[k] = [(e.group_id, e.texts, e.env_return, e.outcome) for e in eps]
        if k == 1:
            assert gen.overlapped == 0 and fleet.most_in_flight == 1
        else:
            assert gen.overlapped > 0
    assert played[1] == played[2] == played[3]


def test_a_failing_slot_group_fails_the_collect():
    codec = TaskCodec(BlackjackTask(), build_tokenizer())

    class Broken(SeededRandom):
        def generate(self, prompts, seeds):
            if len(self.batch_sizes) == 3:
                raise RuntimeError("engine gone")
            return super().generate(prompts, seeds)

    runner = RolloutRunner(Broken(codec), RulesFleet(8), codec, max_turns=12, slot_groups=2)
    with pytest.raises(RuntimeError, match="engine gone"):
        runner.collect([(g, 7000 + g) for g in range(16)], group_size=4, version=0, sample_seed=3)


def test_slot_groups_make_env_actors_take_that_many_calls_at_once():
    from rlsvc.cluster.placement import planned
    from rlsvc.config import load_config

    two = {role: p.options(0) for role, p in planned(load_config(None, ["rollout.slot_groups=2"])).items()}
    assert two["env"]["max_concurrency"] == 2
    assert all("max_concurrency" not in opts for role, opts in two.items() if role != "env")
    assert "max_concurrency" not in planned(load_config(None, []))["env"].options(0)
