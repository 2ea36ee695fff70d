"""Write the example's problems: one-digit sums ("3+4=" -> "7"), a JSON object a line with a
`split` of train or val (val holds sums never seen in training).

    python -m rlsvc_qa.make_problems --out rlsvc_qa/problems.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path


def problems(seed: int = 0, val_fraction: float = 0.2) -> list[dict[str, str]]:
    pairs = [(a, b) for a in range(10) for b in range(10) if a + b < 10]  # one-digit answers: 55 problems
    random.Random(seed).shuffle(pairs)
    n_val = round(len(pairs) * val_fraction)
    return [{"question": f"{a}+{b}=", "answer": str(a + b), "split": "val" if i < n_val else "train"} for i, (a, b) in enumerate(pairs)]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(Path(__file__).with_name("problems.jsonl")))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    Path(args.out).write_text("".join(json.dumps(row) + "\n" for row in problems(args.seed)))


if __name__ == "__main__":
    main()
