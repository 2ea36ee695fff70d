"""The endpoint job's loop (rlsvc/serve/loop.py) without Ray: in-process fakes for the trainer,
buffer and rewards (as tests/unit/test_grpo_loop.py), the endpoint over a scripted generator on
the real Qwen3 template. A step takes complete groups of ended episodes, leaves out episodes
older than `buffer.max_staleness`, trains on the recorded tokens, and syncs weights while no
endpoint call samples."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rlsvc.buffer.replay import ReplayBuffer
from rlsvc.config import load_config
from rlsvc.models.hf_tokenizer import build_chat_tokenizer
from rlsvc.policy_io import TaskCodec
from rlsvc.serve.loop import AgentsTooSlow, EndpointLoop
from rlsvc.serve.task import EndpointTask
from rlsvc.tools.tiny import tool_tokenizer
from tests.tool_play import ScriptedCalculator
from tests.unit.test_endpoint import QUESTION, TOOLS
from tests.unit.test_grpo_loop import FakeReward, FakeTrainerGroup


class Sync:
    def __init__(self) -> None:
        self.pushed: list[tuple[int, bool]] = []
        self.loop: EndpointLoop | None = None

    def push(self, version):
        assert self.loop is not None
        self.pushed.append((version, self.loop.endpoint.batcher.lock.locked()))
        return {"sync/total_s": 0.0}

    def close(self, timeout_s=None):
        pass


@pytest.fixture
def loop():
    tokenizer = tool_tokenizer(build_chat_tokenizer("qwen3", 720), "qwen3")
    cfg = load_config(
        None,
        ["env.type=endpoint", "env.wait_s=1", "model.source=hf", "model.path=unused", "grpo.groups_per_step=2", "grpo.group_size=2"],
    )
    trainer = FakeTrainerGroup()
    svc = SimpleNamespace(
        generator=ScriptedCalculator("qwen3", tokenizer),
        fleet=None,
        trainer_group=trainer,
        reference_model=None,
        buffer_client=ReplayBuffer(1000),
        reward_client=FakeReward(),
    )
    sync = Sync()
    loop = EndpointLoop(cfg, svc, TaskCodec(EndpointTask(), tokenizer), make_sync=lambda: sync)
    sync.loop = loop
    yield loop, trainer, sync
    loop.close()


def _play(loop: EndpointLoop, group: int, reward: float) -> None:
    """An episode of two calls (the call, then the answer after its result), ended with `reward`."""
    endpoint = loop.endpoint
    episode = endpoint.open(group)
    first = endpoint.chat(episode, {"messages": QUESTION, "tools": TOOLS})["choices"][0]["message"]
    result = {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": "5"}
    endpoint.chat(episode, {"messages": [*QUESTION, first, result], "tools": TOOLS})
    endpoint.end(episode, reward)


def test_a_step_trains_on_complete_groups_of_fresh_episodes(loop):
    loop, trainer, sync = loop
    loop.sync_weights()  # the job's first sync, version 0
    for group, reward in [(5, 1.0), (6, 0.0), (5, 0.0), (7, 1.0), (7, 1.0)]:
        _play(loop, group, reward)
    metrics, episodes = loop.step(0)
    assert sorted({ep.group_id for ep in episodes}) == [5, 7] and len(episodes) == 4  # group 6 is not complete
    assert all(ep.continued and ep.policy_version == 0 and len(ep.responses) == 2 for ep in episodes)
    [batch] = trainer.steps
    assert batch.input_ids.shape[0] == 4  # one row per episode: its recorded sequence
    assert metrics["episodes_trained"] == 4 and metrics["calls_per_episode"] == 2.0 and metrics["endpoint/pending"] == 1.0
    assert sync.pushed == [(0, True), (1, True)] and loop.engine_version == 1  # synced with no endpoint call sampling

    for group in (6, 8, 8, 9, 9):  # group 6's first episode is a version behind: left out (max_staleness 0)
        _play(loop, group, 1.0)
    metrics, episodes = loop.step(1)
    assert sorted({ep.group_id for ep in episodes}) == [8, 9] and all(ep.policy_version == 1 for ep in episodes)
    assert metrics["endpoint/stale_dropped_total"] == 1.0 and metrics["endpoint/pending"] == 1.0


def test_a_step_stops_when_the_agents_end_too_few_groups(loop):
    loop, _, _ = loop
    _play(loop, 1, 1.0)
    with pytest.raises(AgentsTooSlow, match=r"env.wait_s: the agents ended 0 of 2 groups of 2"):
        loop.collect(0, 0)
