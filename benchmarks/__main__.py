"""Every benchmark in one run: `python -m benchmarks` (or `make bench`).

Runs each benchmark as its own process (its own Ray cluster, the whole machine to itself), in
the order below, with a time limit each, then writes benchmarks/results/latest.json (every
figure, the command that measured it, its seconds and exit status) and
benchmarks/results/latest.md (one table per benchmark, each under its command, and the checks
against the targets). docs/benchmarks.md includes that table.

    python -m benchmarks [--only rollout,trl] [--quick]

`--quick` runs every benchmark on a small setting (a few minutes in all): a test that the suite
works, not a measurement; its results go to benchmarks/results/quick/. `--only` measures some
benchmarks again and keeps the others' saved results, each shown with the date it was measured.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.provenance import commit_note, cpu_kind, machine, provenance
from benchmarks.targets import target_rows

__all__ = ["SUITE", "checks", "cpu_kind", "machine", "markdown"]

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"


@dataclass(frozen=True)
class Bench:
    name: str
    title: str
    module: str
    args: list[str]
    quick_args: list[str]
    limit_s: int
    """The benchmark is stopped (and reported as such) after this many seconds."""

    def command(self, quick: bool) -> list[str]:
        return ["python", "-m", f"benchmarks.{self.module}", *(self.quick_args if quick else self.args)]


SUITE = [
    Bench(
        "rollout",
        "Rollout throughput: rlsvc's rollout worker (vLLM) vs Hugging Face generate",
        "rollout_throughput",
        ["--batches", "1", "16", "256"],
        ["--batches", "1", "16", "--tokens", "8", "--pairs", "1", "--warmup", "1"],
        420,
    ),
    Bench(
        "rollout_rep",
        "Rollout throughput, representative: 8-layer Qwen3 (dim 512), GRPO groups sharing prompts, varied lengths, against eager HF generate",
        "rollout_representative",
        ["--pairs", "5"],
        "--pairs 1 --warmup 0 --groups 2 --group-size 4 --prompt-tokens 40 --max-len 24 --layers 2".split(),
        600,
    ),
    Bench(
        "rollout_reasoning",
        "Rollout throughput on the reasoning recipe's generation lengths: tiny Qwen3, GSM8K-format problems, a GRPO step's groups",
        "rollout_reasoning",
        ["--pairs", "5"],
        "--pairs 1 --warmup 0 --problems 100 --groups 2 --group-size 2 --max-tokens 16".split(),
        420,
    ),
    Bench(
        "weight_sync",
        "Weight sync per transport vs memcpy",
        "weight_sync",
        ["--sizes", "10,100,500", "--transports", "shm,ray,broadcast,monarch"],
        ["--sizes", "10", "--transports", "shm,ray", "--repeats", "1"],
        600,
    ),
    Bench(
        "lora_sync",
        "LoRA vs full fine-tuning at the representative size (28M parameters, rank 16): bytes and time per sync, step time, peak memory",
        "lora_sync",
        ["--pairs", "5"],
        ["--pairs", "1", "--layers", "2", "--rows", "4", "--tokens", "16"],
        600,
    ),
    Bench(
        "anatomy",
        "Step anatomy and orchestration overhead, default config, sync and async",
        "step_anatomy",
        ["--steps", "40"],
        ["--steps", "4", "--eval-episodes", "200"],
        600,
    ),
    Bench(
        "speedup",
        "Default step: this checkout vs the commit before issue 17's changes, alternating",
        "step_speedup",
        ["--pairs", "5", "--steps", "12"],
        ["--pairs", "1", "--steps", "3", "--eval-episodes", "200"],
        1200,
    ),
    Bench(
        "floor",
        "Compute floor: the default step's model work in one process, vs the job",
        "compute_floor",
        ["--pairs", "5", "--steps", "20"],
        ["--pairs", "1", "--steps", "3", "--skip", "0"],
        600,
    ),
    Bench(
        "async",
        "Asynchronous vs synchronous training with 50 ms env latency, three slot groups each, alternating",
        "async_rollout",
        # Both modes split the env slots into three groups, so one group's generate call runs
        # while the others' env round trips wait: what a job facing a remote sandbox's latency
        # would set (docs/async.md, "Three slot groups").
        ["--pairs", "5", "--steps", "30", "--extra", "rollout.slot_groups=3"],
        ["--pairs", "1", "--steps", "3", "--skip", "0", "--eval-episodes", "200", "--extra", "rollout.slot_groups=3"],
        1200,
    ),
    Bench(
        "trl",
        "rlsvc vs TRL GRPOTrainer on single-turn BlackJack",
        "vs_trl",
        ["--pairs", "5", "--steps", "45"],
        "--pairs 1 --steps 4 --prompts 8 --eval-every 2 --val-episodes 500 --final-episodes 500 --modes sync".split(),
        1200,
    ),
    Bench(
        "trl_rep",
        "rlsvc vs TRL GRPOTrainer at a representative size: 8-layer Qwen3 (dim 512), multi-token answers",
        "vs_trl_representative",
        # The synchronous loop only: five rounds of three jobs would not fit the suite's 40
        # minutes, and at this size the two loops came within 7% of each other in every
        # whole-suite run of 2026-12-06, each the faster in some (`--modes sync async` runs both).
        ["--pairs", "5", "--steps", "8", "--modes", "sync"],
        ["--pairs", "1", "--steps", "2", "--prompts", "2", "--group-size", "4", "--max-tokens", "8", "--layers", "2", "--modes", "sync"],
        900,
    ),
    Bench(
        "scaling",
        "Scaling: env actors and rollout workers on a simulated multi-node cluster",
        "env_scaling",
        ["--actors", "1", "2", "4", "8", "--rollout-workers", "1", "2", "--slot-groups", "1", "2"],
        ["--actors", "1", "2", "--rollout-workers", "1", "--slot-groups", "1", "2", "--episodes", "64", "--rounds", "1"],
        420,
    ),
    Bench(
        "endpoint_overhead",
        "The OpenAI-compatible endpoint's overhead: the same tool episodes through it vs direct engine calls",
        "endpoint_overhead",
        ["--pairs", "5"],
        ["--pairs", "1", "--episodes", "4", "--warm-steps", "2"],
        600,
    ),
]

# result file of each benchmark module
RESULT_FILES = {
    "rollout_throughput": "rollout_throughput.json",
    "rollout_representative": "rollout_representative.json",
    "rollout_reasoning": "rollout_reasoning.json",
    "weight_sync": "weight_sync.json",
    "lora_sync": "lora_sync.json",
    "step_anatomy": "step_anatomy.json",
    "step_speedup": "step_speedup.json",
    "compute_floor": "compute_floor.json",
    "async_rollout": "async_rollout.json",
    "vs_trl": "vs_trl.json",
    "vs_trl_representative": "vs_trl_representative.json",
    "env_scaling": "env_scaling.json",
    "endpoint_overhead": "endpoint_overhead.json",
}


def checks(results: dict[str, dict]) -> list[tuple[str, str, bool | None]]:
    """(target, measured, met) for each of the suite's targets (benchmarks/targets.py); met None
    when not measured or only reported."""
    return [(row.target, row.measured, row.met) for _, row in target_rows(results)]


def result_commit(result: dict | None) -> str:
    """The commit a benchmark's result says it ran (`commit_note`): its data's provenance, else
    the suite runner's record of the run (a failed run writes no data)."""
    if not result:
        return "not measured"
    data = result.get("data") or {}
    return commit_note(data if "provenance" in data or "head" in data else result)


def markdown(results: dict[str, dict], quick: bool, started: str, total_s: float, on: str | None = None) -> str:
    host = on or machine()
    lines = [
        f"Measured {started} on {host}; the benchmarks below took {total_s / 60:.1f} min"
        + (" (`--quick`: a smoke run, not a measurement)" if quick else "")
        + ". Each row names the commit its benchmark ran.\n",
        "| target | measured: median (min-max) | met | not like for like, or less than it seems | commit |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {row.target} | {row.measured} | {'yes' if row.met else 'no' if row.met is not None else '-'} | {row.caveat or '-'} "
        f"| {result_commit(results.get(bench))} |"
        for bench, row in target_rows(results)
    ]
    for bench in SUITE:
        r = results.get(bench.name)
        if r is None:
            continue
        when = f", measured {r['measured']}" if "measured" in r else ""
        other = ((r.get("data") or {}).get("provenance") or r.get("provenance") or {}).get("host")
        where = f" on {other}" if other and other != host else ""
        lines += ["", f"### {bench.title}", "", f"`{r['command']}` ({r['seconds']:.0f} s{when}{where}, {result_commit(r)})", ""]
        if r["status"] == "ok":
            lines.append(importlib.import_module(f"benchmarks.{bench.module}").markdown(r["data"]))
        else:
            lines.append(f"**{r['status']}** (log: `{r['log']}`)")
    return "\n".join(lines) + "\n"


def run(bench: Bench, quick: bool, out: Path) -> dict:
    cmd = bench.command(quick)
    log = out / "logs" / f"{bench.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"[{bench.name}] $ {shlex.join(cmd)}", flush=True)
    env = dict(os.environ, RLSVC_BENCH_RESULTS=str(out))
    measured = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    t0 = time.perf_counter()
    with log.open("w") as f:
        try:
            rc = subprocess.run(
                [sys.executable, *cmd[1:]], cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=bench.limit_s
            ).returncode
            status = "ok" if rc == 0 else f"failed (exit {rc})"
        except subprocess.TimeoutExpired:
            status = f"stopped after its {bench.limit_s} s limit"
    seconds = time.perf_counter() - t0
    result = {
        "command": shlex.join(cmd),
        "seconds": seconds,
        "status": status,
        "log": str(log.relative_to(ROOT)),
        "measured": measured,
        "provenance": provenance(),
    }
    if status == "ok":
        result["data"] = json.loads((out / RESULT_FILES[bench.module]).read_text())
    print(f"[{bench.name}] {status} in {seconds:.0f} s", flush=True)
    return result


def kept_results(saved: Path, quick: bool) -> dict[str, dict]:
    """The benchmarks of an earlier run (same `--quick` mode), each with the date it was measured."""
    if not saved.exists():
        return {}
    data = json.loads(saved.read_text())
    if data["quick"] != quick:
        return {}
    return {name: {"measured": data["started"], **r} for name, r in data["benchmarks"].items() if name in {b.name for b in SUITE}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated benchmark names: " + ",".join(b.name for b in SUITE))
    ap.add_argument("--quick", action="store_true", help="small settings: checks the suite runs, measures nothing")
    ap.add_argument("--render", action="store_true", help="measure nothing: write latest.md again from latest.json")
    args = ap.parse_args()
    if args.render:
        saved = json.loads(((RESULTS / "quick" if args.quick else RESULTS) / "latest.json").read_text())
        text = markdown(saved["benchmarks"], saved["quick"], saved["started"], saved["total_s"], saved["machine"])
        ((RESULTS / "quick" if args.quick else RESULTS) / "latest.md").write_text(text)
        print(text)
        return 0
    names = [n for n in args.only.split(",") if n] or [b.name for b in SUITE]
    unknown = sorted(set(names) - {b.name for b in SUITE})
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(b.name for b in SUITE)}")
    out = RESULTS / "quick" if args.quick else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    fresh = {b.name: run(b, args.quick, out) for b in SUITE if b.name in names}
    results = {**(kept_results(out / "latest.json", args.quick) if args.only else {}), **fresh}
    results = {b.name: results[b.name] for b in SUITE if b.name in results}  # the suite's order
    dates = sorted({r["measured"] for r in results.values()})
    started = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    total_s = sum(r["seconds"] for r in results.values())
    (out / "latest.json").write_text(
        json.dumps(
            {
                "started": started,
                "machine": machine(),
                "provenance": provenance(),
                "quick": args.quick,
                "total_s": total_s,
                "checks": checks(results),
                "benchmarks": results,
            },
            indent=2,
        )
    )
    text = markdown(results, args.quick, started, total_s)
    (out / "latest.md").write_text(text)
    print(text)
    return 0 if all(r["status"] == "ok" for r in fresh.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
