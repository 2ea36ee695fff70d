"""LoRA's acceptance run: the pretrained-path BlackJack config with LoRA
(configs/blackjack_hf_tiny_lora.yaml) must reach the same held-out target as full fine-tuning
(configs/blackjack_hf_tiny.yaml: final greedy return >= -0.08 over 20,000 deals) in at most 1.2x
its wall time. Both run here, back to back, alternating (LoRA, full, full, LoRA, ... for
`--pairs`), so both see the same machine; writes benchmarks/results/validate_blackjack_hf_tiny_lora.json.

    python scripts/validate_lora.py [--pairs 1] [--lock FILE]

`--lock FILE`: hold an exclusive lock on FILE for each run (not between them), for a machine
whose heavy jobs take turns. Exit status 0 when every LoRA run reaches the target within 1.2x
its pair's full run's wall time, else 1.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from validate_hf import TARGET_RETURN, curve  # noqa: E402

CONFIGS = {"lora": "configs/blackjack_hf_tiny_lora.yaml", "full": "configs/blackjack_hf_tiny.yaml"}
OUT = REPO / "benchmarks" / "results" / "validate_blackjack_hf_tiny_lora.json"
WALL_RATIO = 1.2


class Locked:
    """An exclusive flock on a file for the duration (waits for it)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> None:
        self.f = self.path.open("a")
        fcntl.flock(self.f, fcntl.LOCK_EX)

    def __exit__(self, *_: Any) -> None:
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def run_side(side: str, output_dir: Path, lock: Path | None) -> Path:
    """One job of `side`'s config as a user runs it; its run folder."""
    output_dir.mkdir(parents=True)
    cmd = [sys.executable, "-m", "rlsvc.train", "--config", CONFIGS[side], f"run.output_dir={output_dir}"]
    with Locked(lock) if lock else nullcontext():
        subprocess.run(cmd, cwd=REPO, check=True)
    [run_dir] = [p.parent for p in output_dir.glob("*/result.json")]  # beside it: the tiny checkpoint's folder
    return run_dir


def summarise(side: str, run_dir: Path) -> dict:
    result = json.loads((run_dir / "result.json").read_text())
    sync_bytes = [v for _, v in _history(result, "sync/bytes")]
    return {
        "side": side,
        "config": CONFIGS[side],
        "final greedy return": round(result["eval"]["mean_return"], 4),
        "wall time min": round(result["total_s"] / 60, 2),
        "start-up s": round(result["startup_s"]),
        "GRPO steps": result["steps"],
        "best validation return": result["best_val_return"],
        "warm-start loss": round(_history(result, "warm_start_loss")[0][1], 4),
        "median trainer step s": round(statistics.median(v for _, v in _history(result, "time/train_s")), 3),
        "bytes per sync": int(statistics.median(sync_bytes)) if sync_bytes else None,
        "curve": curve(result),
    }


def _history(result: dict, key: str) -> list[tuple[int, float]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(result["tracking_uri"])
    return [(m.step, m.value) for m in sorted(client.get_metric_history(result["mlflow_run_id"], key), key=lambda m: m.step)]


def verdict(runs: list[dict]) -> dict:
    """Per pair: LoRA's final return against the target, its wall time against the full run's."""
    pairs = []
    for lora, full in zip([r for r in runs if r["side"] == "lora"], [r for r in runs if r["side"] == "full"]):
        ratio = lora["wall time min"] / full["wall time min"]
        met = lora["final greedy return"] >= TARGET_RETURN and ratio <= WALL_RATIO
        pairs.append(
            {
                "lora return": lora["final greedy return"],
                "full return": full["final greedy return"],
                "wall ratio": round(ratio, 3),
                "met": met,
            }
        )
    return {"pairs": pairs, "met": bool(pairs) and all(p["met"] for p in pairs)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=1, help="LoRA/full pairs, the order flipped each pair")
    p.add_argument("--lock", type=Path, help="a file to lock exclusively during each run")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--done", nargs="*", default=[], metavar="SIDE=RUN_DIR", help="finished runs to count first (lora=... or full=...)")
    args = p.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="rlsvc-validate-lora-"))
    done = [tuple(d.split("=", 1)) for d in args.done]
    runs = [summarise(side, Path(folder)) for side, folder in done]
    order = [side for k in range(args.pairs) for side in (("lora", "full") if k % 2 == 0 else ("full", "lora"))]
    for side, _ in done:
        if side in order:
            order.remove(side)
    for k, side in enumerate(order):
        runs.append(summarise(side, run_side(side, base / f"{k}-{side}", args.lock)))
        print(json.dumps({key: v for key, v in runs[-1].items() if key != "curve"}), flush=True)
    summary = {
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": f"python scripts/validate_lora.py --pairs {args.pairs}" + "".join(f" --done {side}=RUN_DIR" for side, _ in done),
        "target": f"LoRA's final greedy return >= {TARGET_RETURN} in <= {WALL_RATIO}x full fine-tuning's wall time",
        **verdict(runs),
        "runs": runs,
    }
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=2))
    return 0 if summary["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
