"""rlsvc against TRL's `GRPOTrainer` at a representative size: a 28M-parameter Qwen3 checkpoint
answering arithmetic word problems in free text of several tokens.

- The model: the representative rollout benchmark's (dim 512, 8 layers, 8 heads of 64, MLP 1536,
  a vocabulary of 8192 tokens; `make_policy` in benchmarks/rollout_representative.py; results
  written before 2026-12-07 had 832 rows, 778 tokens), made once here with its byte-level BPE
  chat tokenizer; both sides load the same
  Hugging Face folder (rlsvc through its TorchTitan adapter and vLLM, TRL through `transformers`).
- The task (benchmarks/answer_task.py): a seeded word problem as a chat message; the policy
  answers in up to `--max-tokens` tokens (sampled at temperature 1, ended by the end-of-turn
  token); the reward is 1 for the exact number, 0.1 for another number, else 0 (the same
  function on both sides). rlsvc runs it as a plug-in task (`env.task=...`) through its OpenEnv
  environment; TRL as a reward function.
- The same GRPO settings on both sides (those of benchmarks/vs_trl.py): groups of `--group-size`
  completions of one prompt, `--prompts` prompts a step, AdamW with rlsvc's default learning
  rate and a constant schedule, grad-norm clip 1, clip epsilon 0.2, k3 KL to the start policy
  with rlsvc's default weight, group-std-normalised advantages, token-mean loss, one optimiser
  step per batch; both prompt the model with the same token ids (the chat template with its
  generation prompt).
- rlsvc: `python -m rlsvc.train model.source=hf model.path=FOLDER ...`, in each of its loops
  (`--modes`): synchronous (a step generates, then scores, then trains: the same schedule as
  TRL's) and asynchronous with `max_staleness=1` (the rollout worker generates the next batch
  while the trainer learns from this one, each on its share of the cores), as in
  benchmarks/vs_trl.py. TRL: its default generation path (`transformers` `generate`; TRL's vLLM
  path needs CUDA), `use_cpu=True`, 2 threads (what rlsvc's trainer reserves).
  Each side as shipped: rlsvc's trainer, reference and rollout processes keep the memory they
  free (`trainer.keep_freed_memory`, `rollout.keep_freed_memory`, on by default; rlsvc/malloc.py),
  TRL's process runs with glibc's default malloc.

Samples/s: completions per second of training (start-up excluded, and rlsvc's checkpoints, at
the start and after the last step: TRL's side saves nothing, `save_strategy="no"`), over
`--steps` steps. The
sides alternate (benchmarks/pairs.py): `--pairs` rounds of one run each, the order reversed
every round (TRL between rlsvc's two modes when both run, as in benchmarks/vs_trl.py); each round
gives one ratio per rlsvc mode (its samples/s over TRL's), reported as the median with its
min-max. The headline is like for like: rlsvc's synchronous loop against TRL's, which is
synchronous. Round i runs seed `--seed` + i on every side (`--same-seed`: `--seed` in every
round, as the results before 2026-12-07 did); both sides start from the same random policy with
fresh optimisers (no warm start here). The model is random: no learning is shown, and the
mean training rewards are reported, not compared. Each side's time is also split: rlsvc's from its step metrics (generation,
reference, train; in the asynchronous loop generation and scoring run beside the trainer, and
the trainer's wait for a batch is shown instead of the reference), TRL's by
timing its `_generate` (sampling) and `_generate_and_score_completions` (sampling, rewards,
reference logprobs) calls; the rest of a TRL step is its training.

    python -m benchmarks.vs_trl_representative [--pairs 3] [--steps 4] [--prompts 4] [--max-tokens 24] [--modes sync async]
                                               [--trl-keep-freed-memory] [--label L]

`--trl-keep-freed-memory` gives TRL's process rlsvc's allocator setting too (rlsvc/malloc.py), to
see how much of the ratio that setting is.

Results: a Markdown table on stdout and benchmarks/results/vs_trl_representative.json
(vs_trl_representative_<L>.json with `--label L`), its table in the .md beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from benchmarks import RESULTS_DIR
from benchmarks.jobs import TRAINING_ONLY, metric_sums, run_job
from benchmarks.pairs import spread
from benchmarks.provenance import write_result
from benchmarks.rollout_representative import MODEL, make_policy
from benchmarks.vs_trl import (
    TRL,
    add_modes_argument,
    add_seed_arguments,
    by_mode,
    grpo_config,
    headline_mode,
    round_order,
    round_seed,
    seeds_note,
    selected_modes,
)

RESULTS = RESULTS_DIR / "vs_trl_representative.json"
TASK = "benchmarks.answer_task:ArithmeticAnswerTask"
RLSVC = "rlsvc (sync)"  # the loop with TRL's schedule: what the bound in the summary is computed from
PHASES = {"generation": "time/generate_s", "reference": "time/reference_s", "train": "time/train_s"}
# the asynchronous loop scores a batch (reference logprobs included) beside the trainer, which
# finds them cached: its own time goes to training and to waiting for the next batch
ASYNC_PHASES = {"generation (beside)": "time/generate_s", "train": "time/train_s", "trainer waiting": "time/trainer_wait_s"}
THREADS = 2  # rlsvc's trainer and rollout worker each reserve 2 CPUs


def seq_len(args: argparse.Namespace) -> int:
    return 96 + args.max_tokens  # the prompts are 40-60 tokens


def run_rlsvc(args: argparse.Namespace, policy: Path, out: Path, name: str, mode: list[str], seed: int = 0) -> dict:
    phases = ASYNC_PHASES if "rollout.asynchronous=true" in mode else PHASES
    overrides = [
        f"run.seed={seed}",
        "model.source=hf",
        f"model.path={policy}",
        f"model.max_seq_len={seq_len(args)}",
        "model.warm_start_steps=0",
        f"env.task={TASK}",
        "env.max_turns=1",
        f"env.sessions_per_actor={args.prompts * args.group_size}",
        f"rollout.max_tokens={args.max_tokens}",
        "rollout.temperature=1.0",
        f"grpo.group_size={args.group_size}",
        f"grpo.groups_per_step={args.prompts}",
        f"run.steps={args.steps}",
        "run.time_budget_minutes=600",
        "run.checkpoint_every=0",
        "eval.every_steps=0",
        "eval.episodes=0",
        *TRAINING_ONLY,
        *mode,
    ]
    # the task module is imported by the driver and by the env and reward actors, which inherit this path
    result = run_job(name, overrides, out, pythonpath=Path(__file__).resolve().parents[1])
    sums = metric_sums(result, [*phases.values(), "return_mean", "time/checkpoint_s"])
    train_s = result["train_s"] - sums["time/checkpoint_s"]
    return {
        "samples_per_s": result["steps"] * args.prompts * args.group_size / train_s,
        "train_s": train_s,
        "steps": result["steps"],
        "startup_s": result["startup_s"],
        "phase_s": {phase: sums[key] / result["steps"] for phase, key in phases.items()},
        "mean_return": sums["return_mean"] / result["steps"],
        "overrides": [o.replace(str(policy), "POLICY") for o in overrides],  # no temporary path in the results
    }


def run_trl(args: argparse.Namespace, policy: Path, out: Path, seed: int | None = None) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from benchmarks.answer_task import ArithmeticAnswerTask, messages, score
    from rlsvc.config import load_config
    from rlsvc.policy_io import CHAT_OPTIONS, TaskCodec
    from rlsvc.problems.arithmetic import arithmetic_problem

    cfg = load_config(None, [])
    torch.set_num_threads(THREADS)
    tokenizer = AutoTokenizer.from_pretrained(policy)
    seeds = [70_000_000 + i for i in range(args.prompts * args.steps)]
    # TRL renders the messages with the chat template, as rlsvc's codec does: the same prompt ids
    codec, first = TaskCodec(ArithmeticAnswerTask(), tokenizer), messages(seeds[0])
    ids = tokenizer.apply_chat_template(first, add_generation_prompt=True, tokenize=True, **CHAT_OPTIONS)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert list(ids) == codec.encode(SimpleNamespace(prompt=first)), "TRL's prompt ids differ from rlsvc's"

    def reward(prompts: list, completions: list, seed: list[int], **_: object) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [score(t, arithmetic_problem(s).answer) for t, s in zip(texts, seed)]

    config = grpo_config(cfg, out, args, seed, max_completion_length=args.max_tokens, chat_template_kwargs=CHAT_OPTIONS)
    t_start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        processing_class=tokenizer,
        train_dataset=Dataset.from_dict({"prompt": [messages(s) for s in seeds], "seed": seeds}),
    )
    timed = {"generate": 0.0, "generate_and_score": 0.0}
    for method, key in (("_generate", "generate"), ("_generate_and_score_completions", "generate_and_score")):
        setattr(trainer, method, _timed(getattr(trainer, method), timed, key))
    startup_s = time.perf_counter() - t_start
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0
    rewards = [row["reward"] for row in trainer.state.log_history if "reward" in row]
    return {
        "samples_per_s": args.steps * args.prompts * args.group_size / train_s,
        "train_s": train_s,
        "steps": args.steps,
        "startup_s": startup_s,
        "phase_s": {
            "generation": timed["generate"] / args.steps,
            "rewards and reference": (timed["generate_and_score"] - timed["generate"]) / args.steps,
            "train": (train_s - timed["generate_and_score"]) / args.steps,
        },
        "mean_return": statistics.mean(rewards),
    }


def _timed(fn, totals: dict[str, float], key: str):
    def call(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            totals[key] += time.perf_counter() - t0

    return call


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3, help="rounds of one run per side, the order reversed every round")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=4, help="prompts (groups) per step")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=24, help="longest answer, in tokens")
    ap.add_argument("--layers", type=int, default=MODEL["layers"], help="model depth (quick runs use fewer)")
    add_seed_arguments(ap)
    add_modes_argument(ap)
    ap.add_argument(
        "--trl-keep-freed-memory", action="store_true", help="TRL's process keeps freed memory as rlsvc's actors do (rlsvc/malloc.py)"
    )
    ap.add_argument("--label", default="", help="results go to vs_trl_representative_<label>.json/.md")
    return ap


def main() -> None:
    args = parser().parse_args()
    from safetensors.torch import load_file

    from rlsvc.models.hf_export import WEIGHTS_FILE

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if args.trl_keep_freed_memory:  # TRL runs in this process; rlsvc's jobs in their own
        from rlsvc.malloc import keep_freed_memory

        keep_freed_memory()
    modes = selected_modes(args.modes)
    sides = [*modes, TRL]
    runs: dict[str, list[dict]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory(prefix="rlsvc-vs-trl-rep-") as tmp:
        out = Path(tmp)
        policy = make_policy(out / "policy", args.layers, seq_len(args))
        for i in range(args.pairs):
            seed = round_seed(args, i)
            for name in round_order(sides, i):
                if name == TRL:
                    (out / f"trl{i}").mkdir()
                    runs[name].append({**run_trl(args, policy, out / f"trl{i}", seed), "seed": seed})
                else:
                    runs[name].append(
                        {**run_rlsvc(args, policy, out, f"vs-trl-rep-{sides.index(name)}-{i}", modes[name], seed), "seed": seed}
                    )
                print(f"round {i} (seed {seed}): {name} {runs[name][-1]['samples_per_s']:.1f} samples/s", flush=True)
        params = sum(v.numel() for v in load_file(str(policy / WEIGHTS_FILE)).values())
        vocab = json.loads((policy / "config.json").read_text())["vocab_size"]
    rows = {
        name: {
            "samples_per_s": statistics.median(r["samples_per_s"] for r in side),
            "samples_per_s_spread": spread([r["samples_per_s"] for r in side]),
            "phase_s": {p: statistics.median(r["phase_s"][p] for r in side) for p in side[0]["phase_s"]},
            "runs": side,
        }
        for name, side in runs.items()
    }
    data: dict = {"args": vars(args), "model_params": params, "vocab_size": vocab, "rows": rows}
    data["by_mode"] = by_mode(data)
    headline = data["by_mode"][headline_mode(data)]["samples_per_s_ratio"]
    data.update(samples_per_s_ratio=headline["median"], samples_per_s_ratio_spread=headline)
    path = RESULTS.with_name(f"vs_trl_representative_{args.label}.json") if args.label else RESULTS
    data = write_result(path, data, markdown)
    print(markdown(data))


def markdown(data: dict) -> str:
    args, rows = data["args"], data["rows"]
    lines = [
        f"Qwen3-style model, {data['model_params'] / 1e6:.0f}M parameters ({args['layers']} layers, vocabulary "
        + (f"{data['vocab_size']}" if "vocab_size" in data else "832: the built-in corpus's 778 tokens, before 2026-12-07")
        + f"); arithmetic word problems "
        f"answered in up to {args['max_tokens']} tokens; {args['prompts']} prompts x {args['group_size']} completions per step, "
        f"{args['steps']} steps a run, {args['pairs']} alternating rounds ({seeds_note(data, args['pairs'])}): median (min-max); "
        "a random model, so no learning is shown"
        + ("; TRL's process kept freed memory as rlsvc's actors do (rlsvc/malloc.py)" if args.get("trl_keep_freed_memory") else "")
        + "\n",
        "| framework | samples/s | s per step: phases | mean training reward, per run |",
        "|---|---|---|---|",
    ]
    for name, r in rows.items():
        s = r["samples_per_s_spread"]
        phases = ", ".join(f"{p} {v:.2f}" for p, v in r["phase_s"].items())
        returns = "/".join(f"{x['mean_return']:.3f}" for x in r["runs"])
        lines.append(f"| {name} | {r['samples_per_s']:.2f} ({s['min']:.2f}-{s['max']:.2f}) | {phases} | {returns} |")
    first = headline_mode(data)
    modes = by_mode(data)
    summary = "\n" + "; ".join(
        f"{name} / TRL GRPOTrainer (synchronous), samples/s"
        + (
            f" (like for like): **{m['samples_per_s_ratio']['median']:.2f}x**"
            if name == first
            else f" (beside it, one version stale): {m['samples_per_s_ratio']['median']:.2f}x"
        )
        + f" ({m['samples_per_s_ratio']['min']:.2f}-{m['samples_per_s_ratio']['max']:.2f}, per round)"
        for name, m in sorted(modes.items(), key=lambda kv: kv[0] != first)
    )
    step = {name: statistics.median(x["train_s"] / x["steps"] for x in r["runs"]) for name, r in rows.items()}
    summary += "; a step takes " + ", ".join(f"{secs:.2f} s in {name}" for name, secs in step.items())
    if RLSVC in rows:
        # what no orchestration of TRL's schedule can change: the model's reference and training
        # passes, which TRL does as well; the asynchronous loop takes generation off that path
        model_s = step[RLSVC] - rows[RLSVC]["phase_s"]["generation"]
        summary += (
            f". Were the synchronous loop's generation free, its step would still take {model_s:.2f} s (reference, training, "
            f"weight sync and the rest): at most **{step[TRL] / model_s:.2f}x** TRL's samples/s in TRL's schedule "
            f"({rows[TRL]['phase_s']['train']:.2f} s of TRL's step is its training alone)"
        )
    return "\n".join([*lines, summary])


if __name__ == "__main__":
    main()
