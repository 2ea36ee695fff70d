"""A supervised warm start for tool calling: whole demonstrated episodes, rendered by the model
family's chat template, learned by the RL trainer's own `sft_step`, written as a Hugging Face
folder the job starts from (`model.source=hf model.path=...`).

    python -m rlsvc.tools.warm_start --family qwen3|llama --out DIR [--task MODULE:CLASS]
        [--steps 400] [--batch 32] [--lr 3e-3] [--seed 0] [--held-out 64] [--max-len 512]

A demonstrated episode is the tokens a rollout would hold (rlsvc/tools/codec.py): the first
prompt with `tools=`, the task's `demonstration` (its calls in the family's own format, read off
the template), the `tool` messages the task's calls return with the generation prompt, then
the task's `final_answer` and the end-of-turn token. Loss is on the two replies only: the
policy learns to write the call the parser reads, and to answer after reading a result.

Why whole episodes and a separate stage: the job's format warm start (`model.warm_start_steps`)
teaches the first reply alone, and a tiny random model given 40 to 150 such steps wrote the
call's frame but no reply that parsed (docs/agents.md). The held-out parse rate (greedy first
replies of problems not trained on, read by the family's parser) is measured on the written
folder, loaded by `transformers` as a user would, and printed with the folder.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlsvc.sft.examples import Example


@dataclass(frozen=True)
class ParseRate:
    problems: int
    parsed: float
    """share of greedy first replies the family's parser reads as calls of a declared tool"""
    answered: float
    """share whose greedy reply after the demonstrated call's results is an answer (no calls)"""
    correct: float
    """share of those answers the task scores 1"""


def episode_example(task: Any, codec: Any, problem: Any) -> Example:
    """One demonstrated episode as the rollout's token sequence, loss on the policy's replies."""
    reply = task.demonstration(problem)
    answer = task.final_answer(problem)
    if reply is None or answer is None:
        raise ValueError(f"task {task.name}: the tool warm start needs `demonstration` and `final_answer`")
    prompt = codec.tokens(task.prompt(problem))
    calls = codec.answer_ids(reply)
    results = codec.template.results_ids(demonstrated_results(task, problem, reply))
    final = codec.answer_ids(answer)
    ids = prompt + calls + results + final
    return Example(ids, [0] * len(prompt) + [1] * len(calls) + [0] * len(results) + [1] * len(final))


def demonstrated_results(task: Any, problem: Any, reply: Any) -> list[dict[str, str]]:
    return [{"name": c.name, "content": task.run_call(problem, c.name, c.arguments)} for c in reply.calls]


def train(folder: Path, out: Path, task: Any, steps: int, batch: int, lr: float, seed: int, max_len: int) -> list[float]:
    """`steps` supervised steps of `batch` fresh demonstrated episodes each, from the checkpoint
    in `folder` on one in-process TorchTitan trainer; the result written to `out`."""
    from transformers import AutoTokenizer

    from rlsvc.models.spec import PretrainedModel
    from rlsvc.sft.batching import collate
    from rlsvc.trainer.titan_trainer import TitanTrainer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    codec = task.make_codec(tokenizer)
    spec = PretrainedModel(str(folder), max_len)
    trainer = TitanTrainer(spec, lr=lr, seed=seed, device="cpu")
    rng, pad = random.Random(seed), tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    losses = []
    for _ in range(steps):
        examples = [episode_example(task, codec, task.problem(train_seed(rng))) for _ in range(batch)]
        losses.append(trainer.sft_step(*collate(examples, pad)))
    spec.save(out, trainer.hf_state_dict())
    return losses


def train_seed(rng: random.Random) -> int:
    """A training problem's seed: even, so the odd seeds `parse_rate` uses are never trained on."""
    return 2 * rng.randrange(2**30)


def parse_rate(folder: Path, task: Any, problems: int, max_new_tokens: int = 64) -> ParseRate:
    """Greedy replies of the checkpoint in `folder` to `problems` held-out problems (odd seeds)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlsvc.sft.evaluate import greedy_completions

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    codec = task.make_codec(tokenizer)
    held_out = [task.problem(2 * i + 1) for i in range(problems)]
    first = [codec.tokens(task.prompt(p)) for p in held_out]
    replies = [codec.parse(t) for t in greedy_completions(model, tokenizer, first, max_new_tokens, 32)]
    # the second turn after the demonstrated call, so the answer is measured whatever the first reply was
    seconds = []
    for p, ids in zip(held_out, first, strict=True):
        demo = task.demonstration(p)
        seconds.append(ids + codec.answer_ids(demo) + codec.template.results_ids(demonstrated_results(task, p, demo)))
    answers = [codec.parse(t) for t in greedy_completions(model, tokenizer, seconds, max_new_tokens, 32)]
    final = [(p, a) for p, a in zip(held_out, answers, strict=True) if a is not None and not a.calls]
    return ParseRate(
        problems,
        sum(r is not None and bool(r.calls) for r in replies) / problems,
        len(final) / problems,
        sum(task.score(p, a.content) >= 1.0 for p, a in final) / problems,
    )


def make_checkpoint(
    family: str,
    out: Path,
    task: Any,
    *,
    steps: int,
    batch: int,
    lr: float,
    seed: int = 0,
    max_len: int = 512,
    held_out: int = 64,
    vocab_size: int = 1024,
) -> tuple[list[float], ParseRate]:
    """A tiny random `family` checkpoint with tool support, warm-started on `task`, at `out`;
    the step losses and its held-out parse rate. Its tokenizer is trained on the task's
    rendered episodes: the tool template's long system prompt then takes a few dozen tokens
    instead of about 400 of the mixed corpus's, and a step costs that much less."""
    from rlsvc.models.make_tiny_hf import make_tiny_hf
    from rlsvc.tools.tiny import add_tool_support

    with tempfile.TemporaryDirectory() as tmp:
        corpus = episode_corpus(family, task, Path(tmp), seed)
        base = make_tiny_hf(family, Path(tmp) / family, seed=seed, max_position=max_len, corpus=corpus, vocab_size=vocab_size)
        add_tool_support(base, family)
        losses = train(base, out, task, steps, batch, lr, seed, max_len)
    return losses, parse_rate(out, task, held_out)


def episode_corpus(family: str, task: Any, tmp: Path, seed: int, episodes: int = 400) -> Path:
    """A JSONL file of demonstrated episodes as text, rendered by a throwaway tiny tokenizer
    with the family's template: the text the real tokenizer is trained on."""
    from transformers import AutoTokenizer

    from rlsvc.models.make_tiny_hf import make_tiny_hf
    from rlsvc.tools.tiny import add_tool_support

    scratch = make_tiny_hf(family, tmp / "scratch", seed=seed, layers=1)
    add_tool_support(scratch, family)
    tokenizer = AutoTokenizer.from_pretrained(str(scratch))
    codec = task.make_codec(tokenizer)
    rng = random.Random(seed)
    rows = [tokenizer.decode(episode_example(task, codec, task.problem(train_seed(rng))).ids) for _ in range(episodes)]
    path = tmp / "corpus.jsonl"
    path.write_text("".join(json.dumps({"text": r}) + "\n" for r in rows))
    return path


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlsvc.tools.warm_start", description=__doc__.split("\n\n")[0])
    p.add_argument("--family", required=True, choices=["qwen3", "llama"])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--task", default="rlsvc.tasks.calculator:CalculatorTask", help="a tool task with demonstration and final_answer")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--held-out", type=int, default=64)
    p.add_argument("--max-len", type=int, default=512)
    a = p.parse_args(argv)
    if a.out.exists() and any(a.out.iterdir()):
        print(f"--out: {a.out} exists and is not empty", file=sys.stderr)
        return 2
    from rlsvc.tasks.registry import resolve

    task = resolve(a.task)()
    losses, rate = make_checkpoint(
        a.family, a.out, task, steps=a.steps, batch=a.batch, lr=a.lr, seed=a.seed, max_len=a.max_len, held_out=a.held_out
    )
    print(json.dumps({"out": str(a.out), "first_loss": losses[0], "last_loss": losses[-1], **asdict(rate)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
