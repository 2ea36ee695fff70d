"""`rlsvc COMMAND [options]`, the console script `pip install` puts on PATH. Each command is the
same program as its `python -m` form, with the same options (which keep working)."""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("rlsvc.train", "train a policy with GRPO on a Ray cluster (python -m rlsvc.train)"),
    "eval": ("rlsvc.eval", "evaluate a saved policy with its task's evaluation (python -m rlsvc.eval)"),
    "compare": ("rlsvc.compare", "compare MLflow runs: differing settings, curves (python -m rlsvc.compare)"),
    "chaos": ("rlsvc.cluster.chaos", "kill random rlsvc actors of a running job (python -m rlsvc.chaos)"),
    "sandbox": ("rlsvc.sandbox.__main__", "run code in the local sandbox (python -m rlsvc.sandbox)"),
    "tasks": ("rlsvc.tasks.__main__", "list the installed tasks and their options; `score`: a programming problem (python -m rlsvc.tasks)"),
    "score": ("rlsvc.problems.score", "score a solution against a programming problem's hidden tests (python -m rlsvc.problems)"),
    "serve-env": ("rlsvc.envs.serve", "serve a task's OpenEnv environment as its own process (python -m rlsvc.envs.serve)"),
    "make-tiny-hf": ("rlsvc.models.make_tiny_hf", "write a tiny Hugging Face model (python -m rlsvc.models.make_tiny_hf)"),
    "sft": ("rlsvc.sft.__main__", "fine-tune a Hugging Face checkpoint on worked solutions, for RL to start from (python -m rlsvc.sft)"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items())
    return f"usage: rlsvc COMMAND [options]   (rlsvc COMMAND --help for a command's options)\n\ncommands:\n{rows}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    if args[0] not in COMMANDS:
        print(f"rlsvc: unknown command {args[0]!r} (commands: {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[args[0]][0])
    return int(module.main(args[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
