"""Evaluate any task's saved policy through the task's own evaluation hook (`Task.evaluate`).

CLI:    python -m rlsvc.eval --checkpoint DIR [--config FILE] [--episodes N] [--seed S] [KEY=VALUE ...]
        (or `rlsvc eval ...`; prints the hook's scores as JSON)

The task is the run's: the config.yaml `rlsvc.train` wrote in the run folder that holds the
checkpoint folder, or `--config` (and dotted overrides, as for `rlsvc.train`). A Hugging Face
folder with neither is read as BlackJack's (the default task). BlackJack keeps its exact deal
evaluation (`BlackjackTask.evaluate`); a single-turn task (`rlsvc.single_turn.SingleTurnTask`)
scores greedy completions of its held-out problems; a task without the hook is refused in one
line (exit 2).

Python: any task's policy is loaded and queried with `rlsvc.saved_policy.SavedPolicy`
(`SavedPolicy.load(DIR).complete(prompts)`); BlackJack's with `load_policy(DIR).act(observations)`
-> ["hit", ...]. The BlackJack evaluation names documented here before stay importable from this
module (they live in rlsvc/tasks/blackjack.py and rlsvc/tasks/blackjack_eval.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rlsvc.saved_policy import CheckpointError, check_folder
from rlsvc.task import Task, TaskError
from rlsvc.tasks.blackjack import BlackjackTask, load_policy
from rlsvc.tasks.blackjack_eval import (
    Policy,
    TablePolicy,
    all_states,
    deal_paths,
    evaluate,
    remembered_deals,
    table_rewards,
)

__all__ = [
    "CheckpointError",
    "Policy",
    "TablePolicy",
    "all_states",
    "deal_paths",
    "evaluate",
    "load_policy",
    "main",
    "remembered_deals",
    "table_rewards",
    "task_of",
]


def task_of(checkpoint: Path, config: str | None = None, overrides: list[str] | None = None) -> Task:
    """The task a saved policy was trained on: `config` (with `overrides`) when given, else the
    run folder's config.yaml beside `checkpoint`, else the default config's (BlackJack).
    Raises ConfigError or TaskError (one line each)."""
    from rlsvc.config import load_config
    from rlsvc.tasks.registry import load_task

    run_config = checkpoint.parent / "config.yaml"
    if config is None and run_config.is_file():
        config = str(run_config)
    return load_task(load_config(config, overrides).env)


def run(args: argparse.Namespace) -> dict[str, Any]:
    checkpoint = Path(args.checkpoint)
    check_folder(checkpoint)
    overrides = list(args.overrides) + ([f"env.then_stick_at={args.then_stick_at}"] if args.then_stick_at is not None else [])
    task = task_of(checkpoint, args.config, overrides)
    if args.sample:
        if not isinstance(task, BlackjackTask):
            raise TaskError(f"--sample: only BlackJack's evaluation samples (task {task.name})")
        return evaluate(load_policy(checkpoint), args.episodes, args.seed, greedy=False, then_stick_at=task.then_stick_at)
    if not task.has("evaluate"):
        raise TaskError(f"task {task.name} has no evaluate hook: it has no evaluation of a saved policy (docs/tasks.md)")
    result = task.evaluate(checkpoint, args.episodes, args.seed)
    if result is None:
        raise TaskError(f"task {task.name}: its evaluate hook found nothing to evaluate")
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlsvc.eval", description="Evaluate a saved policy with its task's evaluation hook.")
    p.add_argument("--checkpoint", required=True, help="checkpoint folder printed by rlsvc.train")
    p.add_argument("--config", default=None, help="the run's config (default: config.yaml of the run folder holding the checkpoint)")
    p.add_argument("--episodes", type=int, default=20000, help="episodes to play (default 20000)")
    p.add_argument("--seed", type=int, default=12345, help="seed of the deals (of the held-out problems)")
    p.add_argument("--sample", action="store_true", help="BlackJack: sample actions instead of greedy")
    p.add_argument("--then-stick-at", type=int, default=None, help="BlackJack: the single-turn task (env.then_stick_at)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides, as for rlsvc.train")
    args = p.parse_args(argv)
    if args.episodes < 1:
        print("rlsvc.eval: --episodes must be >= 1", file=sys.stderr)
        return 2
    from rlsvc.config import ConfigError

    try:
        result = run(args)
    except (CheckpointError, ConfigError, TaskError) as e:
        print(f"rlsvc.eval: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
