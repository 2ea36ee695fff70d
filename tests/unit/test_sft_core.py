"""The supervised stage's core (rlsvc/sft/): examples encoded as the rollout encodes prompts, loss on
the answer tokens only, length-grouped batches, and steps of the real TorchTitan trainer on a tiny
Qwen3 checkpoint."""

from __future__ import annotations

import random

import pytest
import torch

from rlsvc.models.make_tiny_hf import make_tiny_hf
from rlsvc.reasoning.data import Problem
from rlsvc.reasoning.generate import generate
from rlsvc.reasoning.prompts import PromptTemplate
from rlsvc.sft.batching import collate, group_by_length, padded_share
from rlsvc.sft.core import SFTCore
from rlsvc.sft.examples import encode, prompt_ids


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_hf("qwen3", tmp_path_factory.mktemp("sft") / "qwen3", seed=1)


@pytest.fixture(scope="module")
def tokenizer(checkpoint):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(checkpoint))


@pytest.fixture(scope="module")
def problems() -> list[Problem]:
    rows = generate(400, 10)["train"]
    return [Problem(r["question"], r["answer"], r["answer"].rsplit("#### ", 1)[1]) for r in rows]


def test_only_the_answer_and_its_closing_eos_carry_loss(tokenizer):
    answer = "3+4=<<3+4=7>>7\n#### 7"
    e = encode(tokenizer, "Question: Tom has 3 pens.\nAnswer:", answer)
    head = prompt_ids(tokenizer, "Question: Tom has 3 pens.\nAnswer:")
    assert e.ids[: len(head)] == head and e.loss_mask == [0] * len(head) + [1] * (len(e) - len(head))
    learned = [t for t, m in zip(e.ids, e.loss_mask) if m]
    assert learned[-1] == tokenizer.eos_token_id and tokenizer.decode(learned[:-1]) == answer
    assert encode(tokenizer, "Question: Tom has 3 pens.\nAnswer:", answer, max_len=len(e)) == e
    assert encode(tokenizer, "Question: Tom has 3 pens.\nAnswer:", answer, max_len=len(e) - 1) is None  # never cut


def test_chat_prompts_go_through_the_chat_template_with_its_generation_prompt(tokenizer):
    messages = PromptTemplate(style="chat", system="Be brief.").render("Tom has 3 pens.")
    e = encode(tokenizer, messages, "#### 3")
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, enable_thinking=False)
    prompt_len = e.loss_mask.index(1)
    assert tokenizer.decode(e.ids[:prompt_len]) == rendered and rendered.endswith("<|im_start|>assistant\n")
    assert rendered.startswith("<|im_start|>system\nBe brief.<|im_end|>")


def test_length_grouping_respects_the_budget_and_cuts_padding(tokenizer, problems):
    core = SFTCore(trainer=None, tokenizer=tokenizer, tokens_per_batch=2048)  # type: ignore[arg-type]
    examples = core.examples(problems)
    lengths = [len(e) for e in examples]
    batches = group_by_length(lengths, 2048, seed=0)
    assert sorted(i for b in batches for i in b) == list(range(len(examples)))
    assert all(len(b) * max(lengths[i] for i in b) <= 2048 for b in batches)
    order = list(range(len(examples)))
    random.Random(0).shuffle(order)
    sizes = [len(b) for b in batches]
    unsorted = [order[sum(sizes[:k]) : sum(sizes[: k + 1])] for k in range(len(sizes))]  # same batch sizes, random rows
    grouped, random_share = padded_share(lengths, batches), padded_share(lengths, unsorted)
    assert grouped < 0.05 < random_share, (grouped, random_share)
    ids, mask = collate([examples[i] for i in batches[0]], pad_id=tokenizer.pad_token_id)
    assert ids.shape == mask.shape and mask.sum().item() == sum(sum(examples[i].loss_mask) for i in batches[0])


def test_one_step_on_a_tiny_qwen3_is_the_answer_tokens_cross_entropy_and_learns(checkpoint, tokenizer, problems):
    from rlsvc.models.spec import PretrainedModel
    from rlsvc.trainer.titan_trainer import TitanTrainer

    trainer = TitanTrainer(PretrainedModel(str(checkpoint), 256), lr=3e-3, device="cpu")
    core = SFTCore(trainer=trainer, tokenizer=tokenizer, tokens_per_batch=1024, max_len=256)
    examples = core.examples(problems[:8])
    ids, mask = next(core.batches(examples))
    before = trainer.logprobs(ids)
    expected = -(before * mask).sum() / mask.sum()  # mean negative log-likelihood of the answer tokens
    assert trainer.sft_step(ids, mask) == pytest.approx(expected.item(), rel=1e-4)
    for _ in range(4):
        trainer.sft_step(ids, mask)
    after = trainer.logprobs(ids)
    assert ((after - before) * mask).sum() / mask.sum() > 0.5  # the answers became more likely
    losses = core.epoch(examples, epoch=1)
    assert len(losses) >= 1 and all(torch.isfinite(torch.tensor(losses)))


def test_every_batch_has_a_row_for_each_rank():
    lengths = [10, 10, 10, 10, 50, 200]  # the longest row alone fills a 256-token budget
    batches = group_by_length(lengths, 256, seed=0, min_rows=2)
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert all(len(b) >= 2 for b in batches) and [5] not in batches
    assert [5] in group_by_length(lengths, 256, seed=0)  # one rank: the budget alone decides
    assert group_by_length([30], 256, seed=0, min_rows=2) == [[0]]  # fewer rows than ranks: the job refuses it first
