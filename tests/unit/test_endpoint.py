"""The OpenAI-compatible endpoint (rlsvc/serve/): an agent written with the `openai` package plays
episodes through it on 127.0.0.1, on the real Qwen3 and Llama 3.1 chat templates (tiny tokenizers
with their tool tokens) and a scripted generator that reads its prompt tokens (the real engine's
side: tests/integration/test_tool_rollout.py). Each call's tokens are recorded as the generator
produced them, later turns extend the recorded tokens, the episode trains on them, and requests
the endpoint refuses get their HTTP errors."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest
from pydantic import ValidationError

from rlsvc.config import EndpointConfig
from rlsvc.serve.batcher import Batcher
from rlsvc.serve.endpoint import Endpoint
from rlsvc.serve.http import serve
from rlsvc.tools.schema import function
from rlsvc.trainer.batch import build_batch
from tests import tool_play
from tests.tool_play import ScriptedCalculator as Scripted

family, tokenizer = tool_play.family, tool_play.tokenizer  # the two families' fixtures

TOOLS = [
    function(
        "calculate",
        "Evaluate an expression.",
        {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    )
]
QUESTION = [{"role": "system", "content": "Use the tool."}, {"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture
def running(family, tokenizer):
    gen = Scripted(family, tokenizer)
    version = {"v": 3}
    endpoint = Endpoint(tokenizer, gen, version=lambda: version["v"])
    with serve(endpoint) as url:
        yield endpoint, gen, version, url
    endpoint.close()


def _open(url: str, **body) -> str:
    return httpx.post(f"{url}/episodes", json=body).json()["id"]


def _agent_episode(client: openai.OpenAI, url: str, episode: str, version: dict) -> list:
    """An agent's loop: call, run the tool calls it gets, send their results, until an answer."""
    messages, completions = list(QUESTION), []
    for _ in range(3):
        c = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS, extra_headers={"X-Episode-Id": episode})
        completions.append(c)
        message = c.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            break
        version["v"] += 1  # the job loaded newer weights between the two calls
        for call in message.tool_calls:
            expression = json.loads(call.function.arguments)["expression"]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": str(eval(expression))})
    return completions


def test_an_openai_agent_plays_episodes_whose_recorded_tokens_train_as_one_sequence(running, tokenizer):
    endpoint, gen, version, url = running
    client = openai.OpenAI(base_url=url, api_key="unused")
    episode = _open(url, group_id=7)
    completions = _agent_episode(client, url, episode, version)
    first, last = completions[0], completions[-1]
    assert first.choices[0].finish_reason == "tool_calls" and first.choices[0].message.tool_calls[0].function.name == "calculate"
    assert last.choices[0].message.content == "The answer is 5." and len(completions) == 2
    records = [c.model_extra["rlsvc"] for c in completions]
    for r in records:  # exactly the prompt the generator received, and what it returned
        assert any(
            p == r["prompt_token_ids"] and o["token_ids"] == r["token_ids"] and o["logprobs"] == r["logprobs"] for p, o in gen.served
        )
    # the second prompt is the first prompt and the sampled tokens, unchanged, plus the tool turn
    assert records[1]["prompt_token_ids"][: len(records[0]["prompt_token_ids"]) + len(records[0]["token_ids"])] == (
        records[0]["prompt_token_ids"] + records[0]["token_ids"]
    )
    assert [r["policy_version"] for r in records] == [3, 4]
    summary = httpx.post(f"{url}/episodes/{episode}/end", json={"reward": 1.0}).json()
    assert summary == {"id": episode, "reward": 1.0, "calls": 2, "invalid": False, "outcome": "ended"}
    [ep] = endpoint.take(10, timeout_s=0)
    assert ep.group_id == 7 and ep.continued and ep.policy_version == 3 and [o["policy_version"] for o in ep.observations] == [3, 4]
    sequence = records[1]["prompt_token_ids"] + records[1]["token_ids"]
    batch = build_batch([ep], tokenizer.pad_token_id or 0)
    mask = batch.loss_mask[0] > 0
    assert batch.input_ids[0][: len(sequence)].tolist() == sequence  # one row: the agent's real sequence
    assert batch.input_ids[0][mask].tolist() == records[0]["token_ids"] + records[1]["token_ids"]
    assert batch.old_logprobs[0][mask].tolist() == records[0]["logprobs"] + records[1]["logprobs"]


def test_a_request_that_does_not_extend_the_recorded_turns_makes_its_episode_invalid(running):
    endpoint, gen, version, url = running
    client = openai.OpenAI(base_url=url, api_key="unused")
    episode = _open(url)
    first = client.chat.completions.create(model="p", messages=QUESTION, tools=TOOLS, extra_body={"episode_id": episode})
    edited = [*QUESTION, {"role": "assistant", "content": "I will guess."}, {"role": "user", "content": "Go on."}]
    second = client.chat.completions.create(model="p", messages=edited, tools=TOOLS, extra_body={"episode_id": episode})
    recorded = first.model_extra["rlsvc"]["prompt_token_ids"] + first.model_extra["rlsvc"]["token_ids"]
    served = second.model_extra["rlsvc"]["prompt_token_ids"]
    assert served[: len(recorded)] != recorded and served == endpoint.turns.first_prompt(edited, TOOLS)  # a fresh rendering
    summary = httpx.post(f"{url}/episodes/{episode}/end", json={"reward": 1.0}).json()
    assert summary["invalid"] and summary["outcome"] == "not_append_only"
    [ep] = endpoint.take(1, timeout_s=0)
    assert ep.failed  # left out of training: its tokens are not one sequence


def test_unknown_ended_and_bad_requests_are_http_errors(running):
    endpoint, gen, version, url = running
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="no episode"):
        client.chat.completions.create(model="p", messages=QUESTION, extra_headers={"X-Episode-Id": "nope"})
    episode = _open(url)
    bad_tools = [function("calculate", "d", {"type": "object", "properties": {"x": {"type": "wibble"}}})]
    with pytest.raises(openai.BadRequestError, match="not a valid JSON schema"):
        client.chat.completions.create(model="p", messages=QUESTION, tools=bad_tools, extra_headers={"X-Episode-Id": episode})
    with pytest.raises(openai.BadRequestError, match="a non-empty list"):
        client.chat.completions.create(model="p", messages=[], extra_headers={"X-Episode-Id": episode})
    with pytest.raises(openai.BadRequestError, match="no episode"):
        client.chat.completions.create(model="p", messages=QUESTION)
    assert httpx.post(f"{url}/episodes/{episode}/end", json={}).status_code == 400  # no reward, no scorer
    assert httpx.post(f"{url}/episodes/{episode}/end", json={"reward": 0.0}).status_code == 200
    with pytest.raises(openai.ConflictError, match="has ended"):
        client.chat.completions.create(model="p", messages=QUESTION, extra_headers={"X-Episode-Id": episode})
    assert httpx.post(f"{url}/episodes/{episode}/end", json={"reward": 0.0}).status_code == 409
    assert httpx.post(f"{url}/episodes/nope/end", json={"reward": 0.0}).status_code == 404
    assert gen.served == []  # nothing refused reached the generator


def test_an_api_key_is_required_off_loopback_and_checked_when_set(family, tokenizer):
    with pytest.raises(ValidationError, match="api_key is required when host is not a loopback address"):
        EndpointConfig(host="0.0.0.0")
    config = EndpointConfig(api_key="s3cret")
    assert "s3cret" not in repr(config) and "s3cret" not in config.model_dump_json()
    endpoint = Endpoint(tokenizer, Scripted(family, tokenizer))
    try:
        with serve(endpoint, config) as url:
            with pytest.raises(openai.AuthenticationError):
                openai.OpenAI(base_url=url, api_key="wrong", max_retries=0).chat.completions.create(model="p", messages=QUESTION)
            assert httpx.post(f"{url}/episodes").status_code == 401
            assert httpx.post(f"{url}/episodes", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    finally:
        endpoint.close()


def test_the_task_scores_a_transcript_when_the_agent_sends_no_reward(family, tokenizer):
    endpoint = Endpoint(tokenizer, Scripted(family, tokenizer), score=lambda messages: float("5" in (messages[-1]["content"] or "")))
    try:
        episode = endpoint.open()
        first = endpoint.chat(episode, {"messages": QUESTION, "tools": TOOLS})
        call = first["choices"][0]["message"]
        result = {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"], "content": "5"}
        endpoint.chat(episode, {"messages": [*QUESTION, call, result], "tools": TOOLS})
        assert endpoint.end(episode).env_return == 1.0
    finally:
        endpoint.close()


class Gated:
    """A generator whose first call waits until the test releases it."""

    def __init__(self) -> None:
        self.release, self.entered, self.batches = threading.Event(), threading.Event(), []

    def generate(self, prompts, seeds):
        self.batches.append(len(prompts))
        self.entered.set()
        self.release.wait(timeout=60)
        return [{"token_ids": [1], "logprobs": [-0.1], "text": str(p)} for p in prompts]


def test_requests_waiting_while_the_engine_samples_go_in_one_generate_call():
    gen = Gated()
    batcher = Batcher(gen, version=lambda: 0)
    try:
        first = batcher.submit([1], 0)
        assert gen.entered.wait(timeout=60)
        waiting = [batcher.submit([2 + i], i) for i in range(3)]
        gen.release.set()
        assert [f.result(timeout=60)[0]["text"] for f in [first, *waiting]] == ["[1]", "[2]", "[3]", "[4]"]
        assert gen.batches == [1, 3]
    finally:
        batcher.close()


class Recorded:
    """A generator that answers at once and keeps each call's batch size."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def generate(self, prompts, seeds):
        self.batches.append(len(prompts))
        return [{"token_ids": [1], "logprobs": [-0.1], "text": str(p)} for p in prompts]


def test_a_turns_requests_that_arrive_apart_wait_for_each_other():
    """Agents' requests of one turn arrive milliseconds apart: the first no longer goes alone
    (`benchmarks/endpoint_overhead.py` measured calls of 1 then 15 for 16 agents, every turn)."""
    gen = Recorded()
    batcher = Batcher(gen, version=lambda: 0, live=lambda: 3, wait_s=30)
    try:
        t0 = time.monotonic()
        futures = []
        for i in range(3):
            futures.append(batcher.submit([i], i))
            time.sleep(0.05)
        assert [f.result(timeout=60)[0]["text"] for f in futures] == ["[0]", "[1]", "[2]"]
        assert gen.batches == [3] and time.monotonic() - t0 < 30  # served when the third came, not at wait_s
    finally:
        batcher.close()


def test_a_batch_waits_at_most_wait_s_for_an_episode_that_sends_nothing():
    gen = Recorded()
    batcher = Batcher(gen, version=lambda: 0, live=lambda: 3, wait_s=0.3)
    try:
        t0 = time.monotonic()
        futures = [batcher.submit([i], i) for i in range(2)]
        [f.result(timeout=60) for f in futures]
        assert gen.batches == [2] and 0.3 <= time.monotonic() - t0 < 30
    finally:
        batcher.close()


def test_each_arrival_restarts_the_wait_so_a_slow_burst_stays_one_call():
    gen = Recorded()
    batcher = Batcher(gen, version=lambda: 0, live=lambda: 6, wait_s=0.3)  # one episode sends nothing
    try:
        futures = []
        for i in range(5):  # 0.4 s from the first to the last, 0.1 s apart
            futures.append(batcher.submit([i], i))
            time.sleep(0.1)
        [f.result(timeout=60) for f in futures]
        assert gen.batches == [5]
    finally:
        batcher.close()


def test_agents_whose_requests_arrive_apart_share_one_generate_call_per_turn(family, tokenizer):
    gen = Scripted(family, tokenizer)
    endpoint = Endpoint(tokenizer, gen, batch_wait_s=30)
    try:
        with serve(endpoint) as url:
            client = openai.OpenAI(base_url=url, api_key="unused")
            episodes = [_open(url) for _ in range(4)]

            def agent(i: int) -> list:
                time.sleep(0.05 * i)  # the agents start apart
                return _agent_episode(client, url, episodes[i], {"v": 0})

            threads = [threading.Thread(target=agent, args=(i,)) for i in range(4)]
            [t.start() for t in threads]
            [t.join(timeout=120) for t in threads]
        assert len(gen.served) == 8 and endpoint.batcher.calls == 2  # two turns, one generate call each
    finally:
        endpoint.close()
