"""`python -m rlsvc.sft [--config FILE] [dotted.key=value ...]` (also `rlsvc sft`): supervised
fine-tuning of a Hugging Face checkpoint on a dataset's worked solutions, on the RL job's trainer
ranks, writing a Hugging Face folder the RL job starts from.

The config, the data and the checkpoint are checked before Ray starts: any problem is one line on
stderr and exit 2.
"""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m rlsvc.sft",
        description="Fine-tune a Hugging Face checkpoint on a dataset's worked solutions (loss on the answers only) "
        "with the RL job's TorchTitan/FSDP2 trainer on Ray; writes a Hugging Face folder (run.out) the RL job "
        "starts from with model.source=hf model.path=FOLDER. Example: configs/sft_arith_tiny.yaml.",
    )
    p.add_argument("--config", help="YAML config file (default: every field's default)")
    p.add_argument("--dry-run", action="store_true", help="print the resolved config, check the data and the checkpoint, and exit")
    p.add_argument("overrides", nargs="*", metavar="key.sub=value", help="dotted overrides, e.g. sft.epochs=2 eval.problems=100")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import yaml

    from rlsvc.config import ConfigError
    from rlsvc.sft.config import load_sft_config

    try:
        cfg = load_sft_config(args.config, args.overrides)
    except ConfigError as e:
        print(f"rlsvc.sft: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), end="")
    from rlsvc.models.hf_titan import HFModelError
    from rlsvc.sft import job
    from rlsvc.task import TaskError

    try:
        if args.dry_run:
            prep = job.prepare(cfg)
            print(f"# data: {len(prep.train)} train, {len(prep.test)} test problems; model: {prep.spec.path}")
            return 0
        outcome = job.run(cfg)
    except (TaskError, HFModelError) as e:  # bad data or checkpoint, named by its setting
        print(f"rlsvc.sft: {e}", file=sys.stderr)
        return 2
    print(f"wrote {outcome.model_dir} (result: {cfg.run.run_dir() / 'result.json'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
