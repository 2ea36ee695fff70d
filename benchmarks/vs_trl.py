"""rlsvc against TRL's `GRPOTrainer` on a task both can run: single-turn BlackJack. The policy
makes the first decision of a hand (HIT or STAND, one token); stick-at-17 plays the rest; the
return of the hand is the reward (an unparsable answer scores `env.invalid_action_penalty`, -1).

Both sides train the same tiny model from the same weights: rlsvc's default TorchTitan Llama
after its format warm start (taken from the rlsvc run's checkpoint and saved as the Hugging Face
folder TRL loads), with the same GRPO settings: groups of 8 completions of one prompt, 64
prompts (512 completions) per step, 1 generated token at temperature 1, AdamW lr 1e-3 with a
constant schedule, grad-norm clip 1, clip epsilon 0.2, k3 KL to the start policy with weight
0.2, group-std-normalised advantages, token-mean loss, one optimiser step per batch.

- rlsvc: `python -m rlsvc.train env.then_stick_at=17 env.num_actors=2 ...` (the OpenEnv
  BlackJack server finishes each hand; vLLM rollout worker, TorchTitan trainer, reference,
  reward and buffer actors), synchronous and asynchronous (`max_staleness=1`).
- TRL: `GRPOTrainer` with its default generation path (`transformers` `generate`; TRL's vLLM
  path needs CUDA), `use_cpu=True`; its reward function is `first_decision_return`, the code
  the OpenEnv environment runs.

Every `--eval-every` steps both sides score their greedy policy with the same function
(`rlsvc.eval.evaluate(..., then_stick_at=17)`) on the same 5,000 validation deals; the time
to target is the training time (validation excluded) until that score first reaches
`--target` (by default what stick-at-17's first decision scores there: the policy has learnt
when it decides as well as that rule). Samples/s: completions per second of training (start-up and validation
excluded, and rlsvc's checkpoints, at the start and after the last step: TRL's side saves
nothing, `save_strategy="no"`). The final greedy return is scored on 20,000 other deals. Each side has the whole
machine in turn, and the sides alternate (benchmarks/pairs.py): `--pairs` rounds of one run
each, in the order rlsvc sync, TRL, rlsvc async, then reversed, and so on (TRL in the middle,
so that each rlsvc mode runs before TRL in one round and after it in the next); each round gives
one ratio per rlsvc mode (its samples/s over TRL's), reported as the median with its min-max.
The headline is like for like: rlsvc's synchronous loop against TRL's, which is synchronous;
the asynchronous loop (one version stale) is reported beside it under its own name.

Seeds: round i runs seed `--seed` + i on every side (rlsvc's `run.seed`: its model init, warm
start, deals and sampling; TRL's `seed`), so the rounds are different trajectories, not replicas
(`--same-seed` runs `--seed` in every round, as the results before 2026-12-07 did). TRL starts
from that round's rlsvc warm start: the weights of the round's first rlsvc run, or, where TRL runs
first, of a one-step rlsvc job of the same seed run for that. Not yet alike: rlsvc's optimiser
starts with the AdamW moments of its format warm start, TRL's from zero (rlsvc has no setting that
resets them).

    python -m benchmarks.vs_trl [--pairs 3] [--steps 60] [--target R] [--seed S] [--same-seed]

Results: a Markdown table on stdout and benchmarks/results/vs_trl.json.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import RESULTS_DIR
from benchmarks.jobs import TRAINING_ONLY, run_job
from benchmarks.pairs import spread
from benchmarks.provenance import write_result

RESULTS = RESULTS_DIR / "vs_trl.json"
THEN_STICK_AT = 17
VAL_SEED, FINAL_SEED = 999, 12345  # rlsvc's eval.val_seed and eval.seed
RLSVC_MODES = {
    "rlsvc (sync)": ["rollout.asynchronous=false", "buffer.max_staleness=0"],
    "rlsvc (async, max_staleness=1)": ["rollout.asynchronous=true", "buffer.max_staleness=1"],
}
TRL = "TRL GRPOTrainer"


def add_modes_argument(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--modes", nargs="+", choices=["sync", "async"], default=["sync", "async"], help="rlsvc's loops to run (the quick run: sync)"
    )


def selected_modes(modes: list[str]) -> dict[str, list[str]]:
    """The entries of RLSVC_MODES that `--modes` asks for."""
    return {name: v for name, v in RLSVC_MODES.items() if ("async" if "async" in name else "sync") in modes}


def time_to_target(times: list[float], values: list[float], target: float) -> float | None:
    """The first time at which the validated return reaches `target`; None if it never does."""
    return next((t for t, v in zip(times, values) if v >= target), None)


def start_policy_folder(run_dir: Path, folder: Path) -> None:
    """The rlsvc run's start policy (its reference: the weights after the format warm start) as
    an HF folder with the run's tokenizer and config."""
    import shutil

    from safetensors.torch import load_file, save_file

    from rlsvc.models.hf_export import WEIGHTS_FILE

    reference = sorted((run_dir / "checkpoints").glob("step_*/reference.safetensors"))[0]
    shutil.copytree(run_dir / "checkpoint", folder)
    save_file(load_file(str(reference)), str(folder / WEIGHTS_FILE), metadata={"format": "pt"})


def round_seed(args: argparse.Namespace, i: int) -> int:
    """The seed of round i on every side."""
    return args.seed + (0 if args.same_seed else i)


def round_order(sides: list[str], i: int) -> list[str]:
    """Round i's order: TRL between the two rlsvc modes (sync, TRL, async), reversed every round."""
    middle = [sides[0], TRL, *sides[1:-1]] if len(sides) == 3 else sides
    return middle if i % 2 == 0 else middle[::-1]


def run_rlsvc(args: argparse.Namespace, out: Path, name: str, mode: list[str], seed: int = 0) -> tuple[dict, Path]:
    # two env actors: the env phase (OpenEnv round trips) then uses both cores (0.50 -> 0.24 s a step)
    overrides = [
        f"run.seed={seed}",
        f"env.then_stick_at={THEN_STICK_AT}",
        "env.num_actors=2",
        f"run.steps={args.steps}",
        "run.time_budget_minutes=600",
        f"eval.every_steps={args.eval_every}",
        f"eval.val_episodes={args.val_episodes}",
        f"eval.episodes={args.final_episodes}",
        "eval.keep_best=false",
        "run.checkpoint_every=0",
        f"grpo.group_size={args.group_size}",
        f"grpo.groups_per_step={args.prompts}",
        *TRAINING_ONLY,
        *mode,
    ]
    result = run_job(name, overrides, out)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=result["tracking_uri"])

    def series(key: str) -> dict[int, float]:
        return {m.step: m.value for m in client.get_metric_history(result["mlflow_run_id"], key)}

    since_start, validate_s, val = series("time/since_start_s"), series("time/validate_s"), series("eval/val_return")
    checkpoint_s = series("time/checkpoint_s")  # at step 0 and after the last step
    # training time at step k: since start, less start-up and the validations and checkpoints
    # before step k (`time/since_start_s` of step k is taken before step k's own validation)
    paused = {k: sum(v for j, v in (*validate_s.items(), *checkpoint_s.items()) if j < k) for k in since_start}
    clock = {k: t - result["startup_s"] - paused[k] for k, t in since_start.items()}
    train_s = result["train_s"] - sum(validate_s.values()) - sum(checkpoint_s.values())
    return {
        "samples_per_s": result["steps"] * args.prompts * args.group_size / train_s,
        "train_s": train_s,
        "steps": result["steps"],
        "val_steps": sorted(val),
        "val_times": [clock[k] for k in sorted(val)],
        "val_returns": [val[k] for k in sorted(val)],
        "final_return": result["eval"]["mean_return"],
        "startup_s": result["startup_s"],
        "overrides": overrides,
    }, Path(result["checkpoint"]).parent


def grpo_config(cfg: Any, out: Path, args: argparse.Namespace, seed: int | None = None, **extra: Any) -> Any:
    """TRL's `GRPOConfig` with rlsvc's GRPO settings (`cfg`, rlsvc's default config): groups of
    `args.group_size` completions of `args.prompts` prompts a step, the same optimiser, KL, clip,
    advantages and loss; `seed`: TRL's (default rlsvc's `run.seed`); `extra`: the rest (the
    completion length, chat template options)."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(out / "trl"),
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=cfg.run.seed if seed is None else seed,
        max_steps=args.steps,
        per_device_train_batch_size=args.prompts * args.group_size,
        gradient_accumulation_steps=1,
        num_generations=args.group_size,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=cfg.trainer.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=cfg.trainer.weight_decay,
        max_grad_norm=cfg.trainer.max_grad_norm,
        adam_beta1=0.9,
        adam_beta2=0.999,
        beta=cfg.grpo.kl_coef,
        epsilon=cfg.grpo.clip_eps,
        num_iterations=1,
        scale_rewards="group",
        loss_type="dapo",
        mask_truncated_completions=False,
        disable_dropout=True,
        dataloader_num_workers=0,
        bf16=False,
        fp16=False,
        **extra,
    )


def run_trl(args: argparse.Namespace, start: Path, out: Path, seed: int | None = None) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOTrainer

    from rlsvc.config import load_config
    from rlsvc.envs.blackjack import first_decision_return, format_prompt, parse_action, seeded_game
    from rlsvc.eval import Policy, evaluate, load_policy
    from rlsvc.models.tokenizer import load_tokenizer
    from rlsvc.policy_io import TaskCodec
    from rlsvc.tasks.blackjack import BlackjackTask

    cfg = load_config(None, [])
    torch.set_num_threads(2)  # the cores rlsvc's trainer reserves (trainer.num_cpus)
    tokenizer = load_tokenizer(start)
    codec = TaskCodec(BlackjackTask(), tokenizer)
    seeds = [50_000_000 + i for i in range(args.prompts * args.steps)]
    # the prompt text whose token ids are exactly rlsvc's (BOS, then the words)
    prompts = [f"{tokenizer.bos_token} {format_prompt(seeded_game(s).view())}" for s in seeds]
    assert tokenizer(prompts[0])["input_ids"] == codec.encode(seeded_game(seeds[0]).view()), "TRL's prompt ids differ from rlsvc's"
    penalty = cfg.env.invalid_action_penalty

    def reward(prompts: list[str], completions: list[str], seed: list[int], **_: object) -> list[float]:
        actions = [parse_action(text) for text in completions]
        return [penalty if a is None else first_decision_return(s, a, THEN_STICK_AT) for a, s in zip(actions, seed)]

    class Validation(TrainerCallback):
        """rlsvc's validation, every `eval_every` steps; its time is kept off the clock."""

        def __init__(self, model: object) -> None:
            self.model, self.t0, self.paused = model, 0.0, 0.0
            self.steps: list[int] = []
            self.times: list[float] = []
            self.returns: list[float] = []

        def on_train_begin(self, *a: object, **k: object) -> None:
            self.t0 = time.perf_counter()

        def on_step_end(self, _args: object, state: object, *a: object, **k: object) -> None:
            if state.global_step % args.eval_every:
                return
            t = time.perf_counter()
            self.steps.append(state.global_step)
            self.times.append(t - self.t0 - self.paused)
            score = evaluate(
                Policy(self.model, tokenizer, "cpu", BlackjackTask()), args.val_episodes, VAL_SEED, then_stick_at=THEN_STICK_AT
            )["mean_return"]
            self.returns.append(score)
            self.paused += time.perf_counter() - t

    config = grpo_config(cfg, out, args, seed, max_completion_length=1)
    t_start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(start, dtype=torch.float32)
    validation = Validation(model)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        processing_class=tokenizer,
        train_dataset=Dataset.from_dict({"prompt": prompts, "seed": seeds}),
        callbacks=[validation],
    )
    startup_s = time.perf_counter() - t_start
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0 - validation.paused
    final = out / "trl-final"
    trainer.save_model(str(final))
    tokenizer.save_pretrained(str(final))
    final_return = evaluate(load_policy(final), args.final_episodes, FINAL_SEED, then_stick_at=THEN_STICK_AT)["mean_return"]
    return {
        "samples_per_s": args.steps * args.prompts * args.group_size / train_s,
        "train_s": train_s,
        "steps": args.steps,
        "val_steps": validation.steps,
        "val_times": validation.times,
        "val_returns": validation.returns,
        "final_return": final_return,
        "startup_s": startup_s,
    }


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3, help="rounds of one run per side, the order reversed every round")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--prompts", type=int, default=64, help="prompts (groups) per step")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument(
        "--target",
        type=float,
        default=None,
        help="validated greedy return that counts as learned (default: what stick-at-17 scores on the validation deals)",
    )
    ap.add_argument("--eval-every", type=int, default=5, help="steps between validations")
    ap.add_argument("--val-episodes", type=int, default=5000)
    ap.add_argument("--final-episodes", type=int, default=20_000)
    add_seed_arguments(ap)
    add_modes_argument(ap)
    return ap


def add_seed_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--seed", type=int, default=0, help="round i runs this seed + i on every side")
    ap.add_argument("--same-seed", action="store_true", help="every round runs --seed: replicas of one trajectory")


def main() -> None:
    args = parser().parse_args()
    from rlsvc.eval import TablePolicy, all_states, evaluate, load_policy

    stick = TablePolicy({(v.player_sum, v.dealer_card, v.usable_ace): "hit" if v.player_sum < 17 else "stand" for v in all_states()})
    stick_return = evaluate(stick, args.val_episodes, VAL_SEED, then_stick_at=THEN_STICK_AT)["mean_return"]
    if args.target is None:
        args.target = stick_return
    modes = selected_modes(args.modes)
    sides = [*modes, TRL]
    runs: dict[str, list[dict]] = {name: [] for name in sides}
    start_returns: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="rlsvc-vs-trl-") as tmp:
        out = Path(tmp)

        def keep_start(seed: int, run_dir: Path) -> Path:
            """The seed's rlsvc warm start as TRL's start policy (rlsvc's runs of a seed warm-start alike)."""
            start = out / f"start{seed}"
            if not start.exists():
                start_policy_folder(run_dir, start)
                start_returns[seed] = evaluate(load_policy(start), args.val_episodes, VAL_SEED, then_stick_at=THEN_STICK_AT)["mean_return"]
            return start

        for i in range(args.pairs):
            seed = round_seed(args, i)
            for name in round_order(sides, i):
                if name == TRL:
                    if not (out / f"start{seed}").exists():  # TRL first in this round: a one-step rlsvc job makes its start
                        sync = next(iter(modes.values()))
                        keep_start(
                            seed, run_rlsvc(argparse.Namespace(**{**vars(args), "steps": 1}), out, f"vs-trl-start-{i}", sync, seed)[1]
                        )
                    (out / f"trl{i}").mkdir()
                    runs[name].append({**run_trl(args, out / f"start{seed}", out / f"trl{i}", seed), "seed": seed})
                else:
                    row, run_dir = run_rlsvc(args, out, f"vs-trl-rlsvc-{sides.index(name)}-{i}", modes[name], seed)
                    runs[name].append({**row, "seed": seed})
                    keep_start(seed, run_dir)
                print(f"round {i} (seed {seed}): {name} {runs[name][-1]['samples_per_s']:.0f} samples/s", flush=True)
    for side in runs.values():
        for run in side:
            run["time_to_target_s"] = time_to_target(run["val_times"], run["val_returns"], args.target)
    # a side's row: its first run's curve, with every run's samples/s and times to target
    rows = {
        name: {**side[0], "samples_per_s": statistics.median(r["samples_per_s"] for r in side), "runs": side} for name, side in runs.items()
    }
    for row in rows.values():
        reached = [r["time_to_target_s"] for r in row["runs"] if r["time_to_target_s"] is not None]
        row["time_to_target_s"] = statistics.median(reached) if reached else None
        row["reached"] = len(reached)
        row["samples_per_s_spread"] = spread([r["samples_per_s"] for r in row["runs"]])
    data: dict = {"args": vars(args), "rows": rows, "start_val_returns": start_returns, "stick_at_17_val_return": stick_return}
    data["by_mode"] = by_mode(data)
    headline = data["by_mode"][headline_mode(data)]
    data.update(
        start_val_return=start_returns[round_seed(args, 0)],
        samples_per_s_ratio=headline["samples_per_s_ratio"]["median"],
        samples_per_s_ratio_spread=headline["samples_per_s_ratio"],
        time_to_target_ratio=headline["time_to_target_ratio"],
    )
    data = write_result(RESULTS, data)
    print(markdown(data))


def headline_mode(data: dict) -> str:
    """The rlsvc mode the headline compares, like for like: the synchronous loop (TRL's
    GRPOTrainer is synchronous), else the one that ran."""
    names = [n for n in data["rows"] if n != TRL]
    return next((n for n in names if "async" not in n), names[0])


def by_mode(data: dict) -> dict[str, dict]:
    """Each rlsvc mode against TRL: the per-round samples/s ratios (median, min, max), and the
    time to target, TRL's median over the mode's (None where a side never reached it). Computed
    from the rows' runs, so results written before it was stored read the same."""
    trl = data["rows"][TRL]
    out = {}
    for name, row in data["rows"].items():
        if name == TRL:
            continue
        ratios = [a["samples_per_s"] / b["samples_per_s"] for a, b in zip(row.get("runs", [row]), trl.get("runs", [trl]))]
        ours, theirs = row.get("time_to_target_s"), trl.get("time_to_target_s")
        out[name] = {"samples_per_s_ratio": spread(ratios), "time_to_target_ratio": theirs / ours if ours and theirs else None}
    return out


def seeds_note(data: dict, runs: int) -> str:
    """What the runs of a row are: replicas of one seed (every result before 2026-12-07) or seeds."""
    if runs == 1:
        return "one run"
    return f"{runs} seeds" if not data["args"].get("same_seed", True) else f"{runs} replicas of one seed"


def markdown(data: dict) -> str:
    args, rows = data["args"], data["rows"]

    def fmt(t: float | None) -> str:
        return "not reached" if t is None else f"{t:.0f} s"

    lines = [
        f"single-turn BlackJack (first decision, then stick-at-{THEN_STICK_AT}), {args['prompts']} prompts x {args['group_size']} "
        f"completions per step, {args['steps']} steps each. Validated return ({args['val_episodes']} deals): start policy "
        f"{data['start_val_return']:+.3f}, stick-at-17's first decision {data['stick_at_17_val_return']:+.3f}\n",
        f"| framework | samples/s | training time to validated return >= {args['target']:+.2f} | validated return at the end | "
        f"final greedy return ({args['final_episodes']} deals) |",
        "|---|---|---|---|---|",
    ]
    pairs = args.get("pairs", 1)
    for name, r in rows.items():
        runs = r.get("runs", [r])
        last = "/".join(f"{x['val_returns'][-1]:+.3f}" for x in runs if x["val_returns"]) or "-"
        final = "/".join(f"{x['final_return']:+.4f}" for x in runs)
        rate = f"{r['samples_per_s']:.0f}" + (
            f" ({r['samples_per_s_spread']['min']:.0f}-{r['samples_per_s_spread']['max']:.0f})" if pairs > 1 else ""
        )
        reach = fmt(r["time_to_target_s"]) + (
            f", {r['reached']} of {seeds_note(data, len(runs))}" if pairs > 1 and r["time_to_target_s"] is not None else ""
        )
        lines.append(f"| {name} | {rate} | {reach} | {last} | {final} |")
    names = list(rows)
    lines += [
        "",
        "validated greedy return (training seconds) after each validation" + (", first round:" if pairs > 1 else ":"),
        "",
        "| step | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for i, step in enumerate(rows[names[0]].get("val_steps", [])):
        cells = [
            f"{r['val_returns'][i]:+.3f} ({r['val_times'][i]:.0f} s)" if i < len(r.get("val_returns", [])) else "-" for r in rows.values()
        ]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    lines += ["", *summary_lines(data)]
    return "\n".join(lines)


def summary_lines(data: dict) -> list[str]:
    """Each rlsvc mode against TRL's synchronous trainer, the like-for-like one first and in bold."""
    args, trl = data["args"], data["rows"][TRL]
    pairs, modes, first = args.get("pairs", 1), by_mode(data), headline_mode(data)
    lines = []
    for name in sorted(modes, key=lambda n: n != first):
        m = modes[name]
        ratio, s = m["samples_per_s_ratio"]["median"], m["samples_per_s_ratio"]
        rate = f"**{ratio:.2f}x**" if name == first else f"{ratio:.2f}x"
        if m["time_to_target_ratio"]:
            reach = f"time to target, TRL / {name}: {'**' if name == first else ''}{m['time_to_target_ratio']:.2f}x{'**' if name == first else ''}"
        elif trl.get("time_to_target_s") is None:
            reach = f"TRL did not reach the target in its {args['steps']} steps"
        else:
            reach = f"{name} did not reach the target"
        label = "like for like" if name == first else "beside it, not like for like: one version stale"
        spread_note = f" ({s['min']:.2f}-{s['max']:.2f}, median of {pairs} rounds)" if pairs > 1 else ""
        lines.append(f"- {name} / TRL GRPOTrainer (synchronous), samples/s ({label}): {rate}{spread_note}; {reach}")
    return [
        *lines,
        "",
        f"The rounds' runs are {seeds_note(data, pairs)}. Not alike on the two sides: rlsvc's optimiser starts with the AdamW "
        "moments of its format warm start, TRL's from zero.",
    ]


if __name__ == "__main__":
    main()
