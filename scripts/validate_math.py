"""The reasoning recipe in miniature, end to end on this CPU (issue 57; docs/reasoning.md, "The
miniature recipe"): generate the arithmetic word problems (1,000 demonstrations with worked
solutions, 5,000 train problems whose answers RL rewards, 500 test), make a tiny Qwen3 checkpoint,
`rlsvc sft` it on the demonstrations (configs/sft_arith_tiny.yaml), then GRPO from its folder on
the train problems (configs/math_tiny_rl.yaml), for each training seed; and, as the control, the
same training time of further SFT on the demonstrations from the SFT folder instead of RL (at the
SFT schedule's end learning rate, constant; the train problems' worked solutions are not the
control's to use: the setting is that only the demonstrations have them). Then, from the first seed's
SFT folder, the RL stage with Dr. GRPO and with GSPO (same config and budget), and dynamic
sampling off vs on for 40 steps. Writes benchmarks/results/validate_math.json: every command, the
SFT curve per epoch, the RL curves (per step, and the whole test split through the rollout
engines before the first step, every `eval.test_every_steps` and after the last: its last point
is the final greedy test accuracy), standard errors, wall times, and whether the recipe's targets
hold.

    python scripts/validate_math.py                     # seeds 1,2, each with the control, then the variants (make validate-math)
    python scripts/validate_math.py --seeds 1 --no-control --no-variants --out FILE --work DIR
    python scripts/validate_math.py --variants-only     # the variants from --work's first seed, into --out

Targets: the SFT start has a greedy test accuracy of 15-70% that has stopped rising (its last
epoch not above the best before it by more than one standard error); GRPO raises it by at least
10 points; SFT + RL take at most 30 minutes wall. Exit 0 when every seed meets them, else 1 (the
file is written either way). Every stage is a subprocess run as a user runs it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results" / "validate_math.json"
SFT_CONFIG = "configs/sft_arith_tiny.yaml"
RL_CONFIG = "configs/math_tiny_rl.yaml"
# the recipe's data and model (docs/reasoning.md says why each)
# (SFT learns from the 1,000 demonstrations' worked solutions, RL from the 5,000 train answers)
GENERATE = ["--level", "easy", "--max-steps", "3", "--max-start", "50", "--max-addend", "50", "--demos", "1000"]
MODEL = ["--family", "qwen3", "--hidden-size", "128", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--intermediate-size", "256"]
# the control continues at the SFT schedule's end learning rate (lr x min_lr_ratio), constant
_TRAINER = yaml.safe_load((REPO / SFT_CONFIG).read_text())["trainer"]
CONTROL_LR = (
    "trainer.lr_schedule=constant",
    "trainer.warmup_steps=0",
    f"trainer.lr={_TRAINER['lr'] * _TRAINER.get('min_lr_ratio', 1.0):g}",
)
LOSSES = ("dr_grpo", "gspo")  # beside GRPO, from the first seed's SFT folder
DYNAMIC_STEPS = 40
SHORT = ("eval.episodes=0", "eval.test_every_steps=0", f"run.steps={DYNAMIC_STEPS}")
START = (0.15, 0.70)
GAIN = 0.10
LIMIT_MINUTES = 30.0


def run(cmd: list[str], log: Path) -> float:
    """Run `cmd` in the repository (output to `log`); its wall seconds. A failure names the log.
    A stage that finished before (its `.done` file beside the log, from an earlier `--resume`d
    run) is not run again: its recorded wall seconds are returned."""
    done = log.with_suffix(".done")
    if done.exists():
        return float(done.read_text())
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with log.open("w") as f:
        code = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "RAY_AUTH_MODE": "disabled"}).returncode
    if code != 0:
        raise SystemExit(f"validate_math: {shlex.join(cmd)} failed (exit {code}); see {log}")
    wall = time.monotonic() - start
    done.write_text(f"{wall:.3f}")
    return wall


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def sft(work: Path, name: str, seed: int, start: Path, data: Path, uri: str, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """`rlsvc sft` from `start` on the demonstrations; its command, wall time and per-epoch curve."""
    cmd = python(
        *("-m", "rlsvc.sft", "--config", SFT_CONFIG, f"run.name={name}", f"run.seed={seed}", f"run.output_dir={work}"),
        *(f"model.path={start}", f"data.train={data / 'demos.jsonl'}", f"data.test={data / 'test.jsonl'}", f"tracking.tracking_uri={uri}"),
        *extra,
    )
    wall = run(cmd, work / f"{name}.log")
    result = json.loads((work / name / "result.json").read_text())
    curve = [
        {"epoch": e["epoch"], "steps": e["steps"], "loss": round(e["loss"], 4), "accuracy": e["accuracy"], "stderr": round(e["stderr"], 4)}
        for e in result["epochs"]
    ]
    epoch_s = [e["train_s"] + (e["eval_s"] or 0.0) for e in result["epochs"]]
    return {
        "command": shlex.join(cmd),
        "wall_s": round(wall, 1),
        "epoch_s": [round(s, 1) for s in epoch_s],
        "curve": curve,
        "folder": result["model_dir"],
    }


def history(result: dict[str, Any], key: str) -> list[tuple[int, float]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(result["tracking_uri"])
    return [(m.step, m.value) for m in sorted(client.get_metric_history(result["mlflow_run_id"], key), key=lambda m: m.step)]


def rl(work: Path, seed: int, folder: str, data: Path, uri: str, name: str = "rl", extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """GRPO (or the loss `extra` names) from the SFT folder; its command, wall time, per-step
    training curve, test-split curve (`eval.test_every_steps`) and final greedy test accuracy."""
    out = work / name
    cmd = python(
        *("-m", "rlsvc.train", "--config", RL_CONFIG, f"model.path={folder}", f"run.seed={seed}", f"run.output_dir={out}"),
        *(f"env.data.train={data / 'train.jsonl'}", f"env.data.test={data / 'test.jsonl'}", f"tracking.tracking_uri={uri}"),
        *extra,
    )
    wall = run(cmd, work / f"{name}.log")
    result = run_result(out)
    final, final_se, n = final_point(result)
    acc = dict(history(result, "strict_accuracy"))
    curve = [
        {"step": s, "train strict accuracy (T=1)": round(acc.get(s, float("nan")), 4), "mean return": round(v, 4)}
        for s, v in history(result, "return_mean")
    ]
    test_se = dict(history(result, "eval/test/greedy_accuracy_stderr"))
    test_curve = [
        {"step": s, "greedy accuracy": round(v, 4), "stderr": round(test_se.get(s, float("nan")), 4)}
        for s, v in history(result, "eval/test/greedy_accuracy")
    ]
    return {
        "command": shlex.join(cmd),
        "wall_s": round(wall, 1),
        "steps": result["steps"],
        "test_curve": test_curve,
        **{f"{key} (mean a step)": mean(history(result, key)) for key in PER_STEP},
        "startup_s": round(result["startup_s"], 1),
        "train_s": round(result["train_s"], 1),
        "accuracy": final,
        "stderr": final_se,
        "problems": n,
        "curve": curve,
    }


def run_result(out: Path) -> dict[str, Any]:
    """The result.json of the one RL run under `out` (`run.output_dir`)."""
    [run_dir] = [p for p in out.iterdir() if p.is_dir() and p.name.startswith("math_tiny_rl")]
    return json.loads((run_dir / "result.json").read_text())


def final_point(result: dict[str, Any]) -> tuple[float | None, float | None, int]:
    """The final weights' greedy test accuracy, its standard error and the problems answered: the
    test-split curve's last point (`eval.test_every_steps`, through the rollout engines), when it
    is at the run's last step (a run stopped early by its time budget has none there). None
    without a curve (`eval.test_every_steps=0`)."""
    curve = result.get("test_eval")
    if not curve or not curve["steps"] or curve["steps"][-1] != result["steps"]:
        return None, None, 0
    last = curve["last"]
    return round(last["greedy_accuracy"], 4), round(last["greedy_accuracy_stderr"], 4), int(last["problems"])


# per-step metrics whose mean over the steps the record keeps (dynamic sampling's effect)
PER_STEP = (
    "episodes_with_signal",
    "episodes_trained",
    "zero_variance_group_rate",
    "dynamic/filtered_rate",
    "dynamic/rounds",
    "time/step_s",
)


def mean(points: list[tuple[int, float]]) -> float | None:
    return round(sum(v for _, v in points) / len(points), 3) if points else None


def plateaued(curve: list[dict[str, Any]]) -> bool:
    """Stopped rising: the last epoch is not above the best epoch before it by more than one s.e."""
    if len(curve) < 2:
        return False
    return curve[-1]["accuracy"] <= max(c["accuracy"] for c in curve[:-1]) + curve[-1]["stderr"]


def start_and_sft(work: Path, seed: int, data: Path, uri: str) -> dict[str, Any]:
    """The seed's tiny start checkpoint, then the SFT stage from it (a seed row's first parts)."""
    start = work / "start"
    make = python(
        "-m", "rlsvc.models.make_tiny_hf", *MODEL, "--seed", str(seed), "--corpus", str(data / "train.jsonl"), "--out", str(start)
    )
    make_s = run(make, work / "make_tiny_hf.log")
    return {
        "seed": seed,
        "make_tiny_hf": {"command": shlex.join(make), "wall_s": round(make_s, 1)},
        "sft": sft(work, "sft", seed, start, data, uri),
    }


def one_seed(work: Path, seed: int, data: Path, uri: str, control: bool) -> dict[str, Any]:
    row: dict[str, Any] = start_and_sft(work, seed, data, uri)
    s = row["sft"]
    r = rl(work, seed, s["folder"], data, uri)
    begin, [zero] = s["curve"][-1], [c for c in r["test_curve"] if c["step"] == 0]
    row |= {
        "rl": r,
        # the SFT job's own evaluation of its folder (transformers, in its driver) ...
        "start_accuracy": begin["accuracy"],
        "start_stderr": begin["stderr"],
        # ... and the RL job's of the same folder before its first step (vLLM), the point the gain
        # is counted from: the final accuracy is the same evaluation's, of the last weights
        "rl_start_accuracy": zero["greedy accuracy"],
        "rl_start_stderr": zero["stderr"],
        # none when the run stopped before its last step's evaluation
        "gain": None if r["accuracy"] is None else round(r["accuracy"] - zero["greedy accuracy"], 4),
        "gain_stderr": None if r["stderr"] is None else round(math.hypot(r["stderr"], zero["stderr"]), 4),
        "sft_plus_rl_minutes": round((s["wall_s"] + r["wall_s"]) / 60, 2),
    }
    if control:  # the RL stage's training time spent on further SFT instead, whole epochs, from the same folder
        # (its steps and test-split evaluations: not its start-up)
        epochs = max(1, round(r["train_s"] / (sum(s["epoch_s"]) / len(s["epoch_s"]))))
        c = sft(work, "sft_more", seed, Path(s["folder"]), data, uri, (f"sft.epochs={epochs}", *CONTROL_LR))
        row["control"] = {**c, "accuracy": c["curve"][-1]["accuracy"], "stderr": c["curve"][-1]["stderr"]}
    row["met"] = bool(
        START[0] <= begin["accuracy"] <= START[1]
        and plateaued(s["curve"])
        and (row["gain"] or 0.0) >= GAIN
        and row["sft_plus_rl_minutes"] <= LIMIT_MINUTES
    )
    return row


def summary_rows(seeds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per seed for the docs' table."""
    rows = []
    for r in seeds:
        c = r.get("control")
        rows.append(
            {
                "seed": r["seed"],
                "SFT start (SFT job's evaluation)": f"{r['start_accuracy']:.3f} +- {r['start_stderr']:.3f}",
                "SFT start (RL job's, step 0)": f"{r['rl_start_accuracy']:.3f} +- {r['rl_start_stderr']:.3f}",
                "after GRPO": f"{r['rl']['accuracy']:.3f} +- {r['rl']['stderr']:.3f}" if r["gain"] is not None else "not reached",
                "gain": f"{r['gain']:+.3f} +- {r['gain_stderr']:.3f}" if r["gain"] is not None else "not reached",
                "further SFT instead (same training time)": f"{c['accuracy']:.3f} +- {c['stderr']:.3f}" if c else "not run",
                "SFT min": round(r["sft"]["wall_s"] / 60, 1),
                "RL min": round(r["rl"]["wall_s"] / 60, 1),
                "GRPO steps": r["rl"]["steps"],
                "met": r["met"],
            }
        )
    return rows


def sft_curves(seeds: list[dict[str, Any]], sft_only: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One row per seed: the greedy test accuracy after each SFT epoch (and the control's epochs),
    as one list (two dozen epochs are too many columns), and the run's wall minutes. `sft_only`
    seeds (their start and SFT stage run alone, `--sft-only`) are labelled so: the record may
    hold the same seed's SFT from a full run too, which need not match it (another machine's
    arithmetic)."""
    rows = []
    for r, label in [*((r, "SFT") for r in seeds), *((r, "SFT (--sft-only run)") for r in sft_only or [])]:
        runs = [(label, r["sft"])] + ([("further SFT (control)", r["control"])] if r.get("control") else [])
        for name, run in runs:
            accuracy = [c["accuracy"] for c in run["curve"]]
            wall = round(run["wall_s"] / 60, 1) if "wall_s" in run else None
            rows.append(
                {
                    "seed": r["seed"],
                    "run": name,
                    "epochs": len(accuracy),
                    "greedy accuracy after each epoch (500 test)": accuracy,
                    "wall min": wall,
                }
            )
    return rows


def rl_curves(seeds: list[dict[str, Any]], spans: int = 6) -> list[dict[str, Any]]:
    """One row per seed: greedy test accuracy at the start and the end, and between them the mean
    strict accuracy of the sampled training answers (T=1.0) over `spans` equal spans of its steps."""
    rows = []
    for r in seeds:
        curve = [c["train strict accuracy (T=1)"] for c in r["rl"]["curve"]]
        every = max(1, math.ceil(len(curve) / spans))
        row: dict[str, Any] = {"seed": r["seed"], "steps per span": every, "start (greedy)": r["start_accuracy"]}
        for i, lo in enumerate(range(0, len(curve), every), 1):
            part = curve[lo : lo + every]
            row[f"span {i} (T=1)"] = round(sum(part) / len(part), 3)
        rows.append({**row, "final (greedy)": r["rl"]["accuracy"]})
    return rows


def test_row(r: dict[str, Any]) -> dict[str, Any]:
    """An RL run's test-split curve as one row: greedy accuracy on the test problems at each
    evaluation's step, then the last one's again with its standard error (the final weights)."""
    row: dict[str, Any] = {f"step {c['step']}": c["greedy accuracy"] for c in r["test_curve"]}
    final = f"{r['accuracy']:.3f} +- {r['stderr']:.3f}" if r["accuracy"] is not None else "not run"
    return {**row, "final": final, "steps": r["steps"], "RL min": round(r["wall_s"] / 60, 1)}


def rl_test_curves(seeds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per seed: the SFT start on the 500, then the RL run's test-split curve."""
    return [{"seed": r["seed"], "SFT start (500)": f"{r['start_accuracy']:.3f}", **test_row(r["rl"])} for r in seeds]


def variants(work: Path, seed: int, data: Path, uri: str, finished_only: bool = False, dynamic: bool = True) -> dict[str, Any]:
    """From the seed's SFT folder: the RL stage again with each other loss (same config and step
    budget), then (`dynamic`) dynamic sampling off and on for `DYNAMIC_STEPS` steps, no
    evaluations. `finished_only`: run nothing, take the stages an earlier run finished."""
    folder = json.loads((work / "sft" / "result.json").read_text())["model_dir"]
    stages = {f"rl_{loss}": (f"grpo.loss={loss}",) for loss in LOSSES}
    if dynamic:
        stages |= {f"rl_dynamic_{on}": (*SHORT, f"grpo.dynamic_sampling={on}") for on in ("false", "true")}
    runs = {
        name: rl(work, seed, folder, data, uri, name, extra)
        for name, extra in stages.items()
        if not finished_only or (work / f"{name}.done").exists()
    }
    played = {on: runs[f"rl_dynamic_{on}"] for on in ("false", "true") if f"rl_dynamic_{on}" in runs}
    return {"seed": seed, "losses": {loss: runs[f"rl_{loss}"] for loss in LOSSES if f"rl_{loss}" in runs}, "dynamic_sampling": played}


def variant_tables(v: dict[str, Any], seeds: list[dict[str, Any]]) -> dict[str, Any]:
    """The loss variants' test-split curves beside the same seed's GRPO, and dynamic sampling's
    gradient-carrying episodes a step, off vs on."""
    [grpo] = [r["rl"] for r in seeds if r["seed"] == v["seed"]]
    runs = {"grpo": grpo, **v["losses"]}
    rows = {name: test_row(r) for name, r in runs.items()}
    steps = sorted({k for row in rows.values() for k in row if k.startswith("step ")}, key=lambda k: int(k.split()[1]))
    # every row lists every evaluation step, in order (the runs' budgets bought different step counts)
    losses = [
        {"seed": v["seed"], "loss": name, **{k: row.get(k, "") for k in steps}, **{k: x for k, x in row.items() if k not in steps}}
        for name, row in rows.items()
    ]
    keys = [f"{k} (mean a step)" for k in PER_STEP]
    dynamic = [
        {
            "grpo.dynamic_sampling": on,
            **{k.replace(" (mean a step)", ""): r[k] for k in keys},
            "steps": r["steps"],
            "RL min": round(r["wall_s"] / 60, 1),
        }
        for on, r in v["dynamic_sampling"].items()
    ]
    return {"loss_curves": losses, **({"dynamic_sampling": dynamic} if dynamic else {}), "variants": v}


PROBES = REPO / "benchmarks" / "results" / "validate_math_probes.json"
# a probe: 100 GRPO steps from the seed's SFT folder, greedy on all 500 test problems every 25
PROBE = ("run.steps=100", "eval.test_every_steps=25")
PROBE_SPAN = 25


def span_means(points: list[tuple[int, float]], span: int = PROBE_SPAN) -> list[float]:
    """The mean of a per-step metric over consecutive spans of `span` steps (steps 1-25, 26-50, ...)."""
    spans: dict[int, list[float]] = {}
    for step, value in points:
        spans.setdefault((step - 1) // span, []).append(value)
    return [round(sum(v) / len(v), 3) for _, v in sorted(spans.items())]


def probe(work: Path, seed: int, data: Path, uri: str, name: str, sets: list[str]) -> dict[str, Any]:
    """One setting tried from the seed's SFT folder (the RL config, `PROBE`, then `sets`): its
    test-split curve (greedy; mean@k and pass@k with `eval.test_samples`) and, per span of
    `PROBE_SPAN` steps, the sampled answers' strict accuracy, the entropy and the response length."""
    folder = json.loads((work / "sft" / "result.json").read_text())["model_dir"]
    r = rl(work / "probes", seed, folder, data, uri, name, (*PROBE, *sets))
    result = run_result(work / "probes" / name)
    zero = r["test_curve"][0]["greedy accuracy"]
    gain = None if r["accuracy"] is None else f"{r['accuracy'] - zero:+.3f} +- {math.hypot(r['stderr'], r['test_curve'][0]['stderr']):.3f}"
    row: dict[str, Any] = {
        "probe": name,
        "settings": " ".join(sets) or "the RL config's",
        "steps": r["steps"],
        # one column per quantity, "step: value" in it: the probes' evaluation steps differ
        "test greedy at steps": [f"{c['step']}: {c['greedy accuracy']:.3f}" for c in r["test_curve"]],
        "gain": gain or "not reached",
    }
    for key, label in (("eval/test/mean_at_k", "mean@k"), ("eval/test/pass_at_k", "pass@k")):
        row[f"test {label} at steps"] = [f"{s}: {v:.3f}" for s, v in history(result, key)] or ""
    for key, label in (("strict_accuracy", "sampled accuracy"), ("entropy", "entropy"), ("response_len_mean", "response length")):
        row[f"{label}, {PROBE_SPAN}-step means"] = span_means(history(result, key))
    # on policy (one optimiser step a batch) the trainer scores the engine's samples as the engine
    # did, at the rollout's temperature: a mismatch at float error and no token clipped, or the
    # ratio is off 1 (as it was at T != 1 before the trainer scored at that temperature)
    for key in ("logprob_mismatch", "clip_frac"):
        points = history(result, key)
        row[f"{key} (max a step)"] = f"{max(v for _, v in points):.1e}" if points else ""
    row |= {
        "zero-variance groups (mean a step)": r["zero_variance_group_rate (mean a step)"],
        "episodes with signal (mean a step)": r["episodes_with_signal (mean a step)"],
        "RL min": round(r["wall_s"] / 60, 1),
        # an object: the docs' table leaves it out
        "run": {"command": r["command"], "test_curve": r["test_curve"], "final": r["accuracy"], "final_stderr": r["stderr"]},
    }
    return row


def record_probe(out: Path, row: dict[str, Any]) -> None:
    """Add a probe's row to the probes file, or replace the row of that name where it stands."""
    old = json.loads(out.read_text())["probes"] if out.exists() else []
    rows = [row if r["probe"] == row["probe"] else r for r in old]
    rows += [] if row in rows else [row]
    write(out, {"measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "probes": rows})


def record(
    results: list[dict[str, Any]], generate: list[str], generate_s: float, sft_only: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The results file: the seeds that ran every stage, and (`sft_only`) seeds whose start and
    SFT stage ran alone (`--sft-only`), in the SFT curves' table."""
    return {
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}",
        "configs": [SFT_CONFIG, RL_CONFIG],
        "generate": {"command": shlex.join(generate), "wall_s": round(generate_s, 1)},
        "targets": {"start": list(START), "gain": GAIN, "sft_plus_rl_minutes": LIMIT_MINUTES},
        "summary": summary_rows(results),
        "sft_curves": sft_curves(results, sft_only),
        "rl_curves": rl_curves(results),
        "rl_test_curves": rl_test_curves(results),
        "seeds": results,
        **({"sft_only": sft_only} if sft_only else {}),
        "met": bool(results) and all(r["met"] for r in results),
    }


def write(out: Path, rec: dict[str, Any]) -> None:
    """The record with repository paths relative and the interpreter as `python`: what a reader
    runs from a checkout, not this machine's paths."""
    text = json.dumps(rec, indent=1) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text.replace(sys.executable, "python").replace(f"{REPO}/", ""))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="1,2", help="training seeds, comma-separated (default 1,2)")
    p.add_argument(
        "--work", type=Path, default=REPO / "runs" / "validate_math", help="data, checkpoints and logs (default runs/validate_math)"
    )
    p.add_argument("--out", type=Path, default=OUT, help=f"the results file (default {OUT.relative_to(REPO)})")
    p.add_argument("--no-control", action="store_true", help="skip the further-SFT control (else run for every seed)")
    p.add_argument("--control-seeds", help="run the control for these seeds only, comma-separated (default: every seed)")
    p.add_argument("--resume", action="store_true", help="keep --work's finished stages (after a failure) and run the rest")
    p.add_argument("--rerender", action="store_true", help="run nothing: rebuild --out's tables from the seeds it holds")
    p.add_argument("--no-variants", action="store_true", help="skip Dr. GRPO, GSPO and dynamic sampling (else on the first seed)")
    p.add_argument("--variants-only", action="store_true", help="only the variants, from --work's finished first seed, into --out")
    p.add_argument("--finished-only", action="store_true", help="with --variants-only: run nothing, record the variants --work finished")
    p.add_argument("--sft-only", action="store_true", help="only the seeds' start and SFT stage, added to --out's record beside its seeds")
    p.add_argument("--no-dynamic", action="store_true", help="the variants without dynamic sampling's off/on runs (the losses only)")
    p.add_argument("--probe", help=f"only a probe of this name from --work's first seed's SFT folder, into {PROBES.relative_to(REPO)}")
    p.add_argument("--set", nargs="*", default=[], help="with --probe: the RL job's overrides (key=value) that make the probe")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    work = args.work.resolve()
    if args.probe:
        uri = f"sqlite:///{work / 'mlflow.db'}"
        record_probe(PROBES, probe(work / f"seed{seeds[0]}", seeds[0], work / "data", uri, args.probe, args.set))
        return 0
    if args.rerender or args.variants_only:
        old = json.loads(args.out.read_text())
        uri = f"sqlite:///{work / 'mlflow.db'}"
        v = (
            variants(work / f"seed{seeds[0]}", seeds[0], work / "data", uri, args.finished_only, not args.no_dynamic)
            if args.variants_only
            else old.get("variants")
        )
        rec = {**record(old["seeds"], [], 0.0, old.get("sft_only")), "measured": old["measured"], "generate": old["generate"]}
        write(args.out, rec | (variant_tables(v, old["seeds"]) if v else {}))
        return 0
    if work.exists() and any(work.iterdir()) and not args.resume:
        raise SystemExit(f"validate_math: --work {work} is not empty; remove it or name another")
    data = work / "data"
    generate = python("-m", "rlsvc.reasoning.generate", "--out", str(data), *GENERATE)
    generate_s = run(generate, work / "generate.log")
    uri = f"sqlite:///{work / 'mlflow.db'}"
    if args.sft_only:
        old = json.loads(args.out.read_text()) if args.out.exists() else {"seeds": []}
        rows = [start_and_sft(work / f"seed{seed}", seed, data, uri) for seed in seeds]
        write(args.out, record(old["seeds"], generate, generate_s, rows))
        return 0
    results: list[dict[str, Any]] = []
    for seed in seeds:  # the file is rewritten after each seed: a cut-short run keeps what it measured
        control = not args.no_control and (args.control_seeds is None or str(seed) in args.control_seeds.split(","))
        results.append(one_seed(work / f"seed{seed}", seed, data, uri, control=control))
        write(args.out, record(results, generate, generate_s))
    rec = record(results, generate, generate_s)
    if not args.no_variants:
        rec |= variant_tables(variants(work / f"seed{seeds[0]}", seeds[0], data, uri, dynamic=not args.no_dynamic), results)
        write(args.out, rec)
    for row in rec["summary"]:
        print(row)
    print(f"met: {rec['met']}  ({args.out})")
    return 0 if rec["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
