"""`rollout.context=episode`: an episode is one token sequence. The runner gives the generator
each turn's prompt as the earlier tokens exactly as sampled plus the environment's reply, cuts
an episode that would outgrow the model's length (`truncated`), and the batch trains it as one
row with the loss on the sampled tokens only. The trainer's micro-batches (sorted, trimmed,
gradients accumulated) give the same step as one pass. Plain objects, no engine: the real vLLM
engine's side is tests/integration/test_token_in_token_out.py."""

from __future__ import annotations

import torch
from conftest import RulesFleet

from rlsvc.models.tokenizer import PAD_ID, build_tokenizer
from rlsvc.policy_io import TaskCodec
from rlsvc.rollout.runner import RolloutRunner
from rlsvc.tasks.blackjack import BlackjackTask
from rlsvc.trainer.batch import TrainBatch, build_batch


class Recorded:
    """HIT below 17, else STAND (read from the observation the codec rendered last), each answer
    two tokens; remembers every prompt it was given."""

    def __init__(self, codec: TaskCodec) -> None:
        self.tok, self.prompts = codec.tokenizer, []

    def generate(self, prompts, seeds):
        self.prompts += [list(p) for p in prompts]
        out = []
        for p, s in zip(prompts, seeds):
            words = self.tok.convert_ids_to_tokens(p)
            total = int(words[-7])  # "player <sum> dealer <card> ace <yes/no> action :" ends every reply
            text = "HIT" if total < 17 else "STAND"
            ids = [self.tok.convert_tokens_to_ids(text), PAD_ID + 1 + s % 3]
            out.append({"token_ids": ids, "logprobs": [-0.1 * (s % 7), -0.5], "text": text})
        return out


def test_each_turn_extends_the_sampled_sequence_and_trains_as_one_row():
    codec = TaskCodec(BlackjackTask(), build_tokenizer())
    gen = Recorded(codec)
    runner = RolloutRunner(gen, RulesFleet(8), codec, max_turns=12, context="episode")
    episodes = runner.collect([(g, 500 + g) for g in range(6)], group_size=2, version=0, sample_seed=1)
    multi = [ep for ep in episodes if len(ep.responses) > 1]
    assert multi, "no hand went past one decision"
    for ep in multi:
        assert ep.continued
        sequence: list[int] = []
        for added, response in zip(ep.prompts, ep.responses):
            assert sequence + added in gen.prompts  # the generator saw the earlier tokens unchanged
            sequence += added + response
        assert ep.sequence() == sequence
    batch = build_batch(episodes, PAD_ID)
    assert batch.input_ids.shape[0] == len(episodes)  # one row per episode, not per decision
    for i, ep in enumerate(episodes):
        row, mask = batch.input_ids[i], batch.loss_mask[i] > 0
        assert int(batch.lengths[i]) == len(ep.sequence())
        assert row[: len(ep.sequence())].tolist() == ep.sequence()
        assert row[mask].tolist() == [t for r in ep.responses for t in r]
        assert torch.equal(batch.old_logprobs[i][mask], torch.tensor([x for lp in ep.logprobs for x in lp]))


def test_an_episode_without_room_to_answer_is_cut_and_counted():
    codec = TaskCodec(BlackjackTask(), build_tokenizer())
    first = len(codec.encode(RulesFleet(1).reset([0], [500])[0]))
    codec.prompt_room = first + 2 + 2  # room for the first turn and its answer, not for a reply
    runner = RolloutRunner(Recorded(codec), RulesFleet(8), codec, max_turns=12, context="episode")
    episodes = runner.collect([(g, 500 + g) for g in range(6)], group_size=2, version=0, sample_seed=1)
    hit_first = [ep for ep in episodes if ep.texts[0] == "HIT" and ep.outcome not in ("loss",)]
    assert hit_first and all(ep.outcome == "truncated" and len(ep.responses) == 1 for ep in hit_first)


def test_micro_batches_make_the_same_step_as_one_pass():
    from rlsvc.config import TitanModelConfig
    from rlsvc.trainer.titan_trainer import TitanTrainer

    cfg = TitanModelConfig(max_seq_len=64)
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(8, 64, (40,), generator=g)
    ids = torch.randint(3, 60, (40, 64), generator=g)
    mask = torch.zeros(40, 64)
    for i, n in enumerate(lengths.tolist()):
        mask[i, n - 3 : n] = 1.0
    batch = TrainBatch(
        input_ids=ids,
        loss_mask=mask,
        old_logprobs=torch.full((40, 64), -3.0),
        advantages=torch.randn(40, generator=g),
        lengths=lengths,
    )
    results = []
    for budget in (10**9, 300):  # one pass; 9 sorted, trimmed passes
        trainer = TitanTrainer(cfg, lr=1e-2, device="cpu", micro_batch_tokens=budget)
        assert len(trainer._micro_batches(lengths)) == (1 if budget > 10**6 else 9)  # ceil(40 * 61 / 300)
        grads: dict[str, torch.Tensor] = {}

        def capture(trainer=trainer, grads=grads):  # the accumulated gradient the optimiser would apply
            grads.update({n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None})
            trainer.optimizer.zero_grad(set_to_none=True)
            return 0.0, True

        trainer._step_optimizer = capture
        metrics = trainer.train_step(batch)
        lp = trainer.logprobs(ids, None, lengths)
        results.append((metrics, grads, lp))
    (m1, w1, lp1), (m2, w2, lp2) = results
    for k in ("loss", "clip_frac", "entropy", "tokens" if "tokens" in m1 else "loss"):
        assert abs(m1[k] - m2[k]) < 1e-5, k
    assert w1.keys() == w2.keys() and all(torch.allclose(w1[k], w2[k], atol=1e-7, rtol=1e-4) for k in w1)
    valid = torch.arange(64)[None] < lengths[:, None]
    assert torch.allclose(lp1[valid], lp2[valid], atol=1e-5)
