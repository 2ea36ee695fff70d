"""A deterministic generator of GSM8K-format multi-step arithmetic word problems.

Each problem follows one person's count of one kind of item through 2-4 operations (gets more,
gives some away, multiplied by k, split into k piles keeping one), and its answer is a worked solution
in GSM8K's format: one line per step with a calculator annotation `<<a*b=c>>`, then `#### N`.
The vocabulary is small on purpose (a few names, items and verbs) so a tiny model's tokenizer
covers it and the skill left to learn is the arithmetic chain, not the language.

Train and test are disjoint by construction: a problem's split is a hash of its arithmetic
skeleton (the start value and the operations with their operands), never of its wording, so the
same calculation cannot land in both splits even under a different name or item.
`check_disjoint` checks it again on the written rows.

    python -m rlsvc.reasoning.generate --out data/arith            # 5,000 train, 500 test
    python -m rlsvc.reasoning.generate --out DIR --level hard --parquet
    python -m rlsvc.reasoning.generate --out DIR --demos 1000       # also demos.jsonl: 1,000 more

`--demos N` models the usual reasoning-RL setting, where worked solutions are scarce and final
answers cheap: `demos.jsonl` holds N further train-side problems (the first N the generator
deals, then the train split's), which the supervised stage learns from, solutions included; RL
learns from the train split, whose rewards need only the final answers. Demonstrations, train
and test are pairwise disjoint.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

NAMES = ("Tom", "Ann", "Sam", "Mia", "Ben", "Eva", "Leo", "Zoe")
ITEMS = ("apples", "books", "coins", "cards", "pens", "eggs", "shells", "stamps")
OPS = ("add", "sub", "mul", "div")


@dataclass(frozen=True)
class Difficulty:
    """The knobs: how many operations and how large the numbers get."""

    min_steps: int = 2
    max_steps: int = 4
    max_start: int = 20
    """the first count is drawn from 2..max_start"""
    max_addend: int = 20
    """added or removed amounts are drawn from 1..max_addend"""
    max_factor: int = 5
    """multipliers and divisors are drawn from 2..max_factor"""
    max_value: int = 200
    """no count (start, intermediate or final) exceeds this"""
    ops: tuple[str, ...] = OPS

    def __post_init__(self) -> None:
        if not 1 <= self.min_steps <= self.max_steps:
            raise ValueError(f"steps: need 1 <= min_steps <= max_steps, got {self.min_steps}..{self.max_steps}")
        if self.max_start < 2 or self.max_addend < 1 or self.max_factor < 2 or self.max_value < self.max_start:
            raise ValueError("number ranges: need max_start >= 2, max_addend >= 1, max_factor >= 2, max_value >= max_start")
        if not self.ops or set(self.ops) - set(OPS):
            raise ValueError(f"ops: choose from {', '.join(OPS)}, got {self.ops}")


# easy: two additive steps; medium: 2-3 steps with products; hard (the default): 2-4 of all four.
LEVELS = {
    "easy": Difficulty(min_steps=2, max_steps=2, ops=("add", "sub")),
    "medium": Difficulty(min_steps=2, max_steps=3, ops=("add", "sub", "mul")),
    "hard": Difficulty(),
}


@dataclass(frozen=True)
class Step:
    op: str
    operand: int
    before: int
    after: int


def _next_step(rng: random.Random, value: int, d: Difficulty) -> Step | None:
    """One operation on `value` that keeps every count in 0..max_value; None if the drawn
    operation has no valid operand (e.g. dividing a prime), and the caller draws again."""
    op = rng.choice(d.ops)
    if op == "add":
        k = rng.randint(1, d.max_addend)
        return Step(op, k, value, value + k) if value + k <= d.max_value else None
    if op == "sub":
        k = rng.randint(1, min(d.max_addend, value)) if value >= 1 else 0
        return Step(op, k, value, value - k) if k >= 1 else None
    if op == "mul":
        k = rng.randint(2, d.max_factor)
        return Step(op, k, value, value * k) if value * k <= d.max_value else None
    divisors = [k for k in range(2, d.max_factor + 1) if value % k == 0 and value > 0]
    if not divisors:
        return None
    k = rng.choice(divisors)
    return Step(op, k, value, value // k)


def _steps(rng: random.Random, d: Difficulty) -> tuple[int, list[Step]]:
    start = rng.randint(2, d.max_start)
    want = rng.randint(d.min_steps, d.max_steps)
    steps: list[Step] = []
    value = start
    while len(steps) < want:
        step = _next_step(rng, value, d)
        if step is not None:
            steps.append(step)
            value = step.after
    return start, steps


QUESTION = {
    "add": "Then {he} gets {k} more {item}.",
    "sub": "Then {he} gives away {k} {item}.",
    "mul": "Then the number of {item} {he} has is multiplied by {k}.",
    "div": "Then {he} splits {his} {item} into {k} equal piles and keeps one pile.",
}
SOLUTION = {  # short lines: every token of a worked solution is a token the policy must generate
    "add": "{he_cap} gets {k} more: {a}+{k}=<<{a}+{k}={b}>>{b}.",
    "sub": "{he_cap} gives away {k}: {a}-{k}=<<{a}-{k}={b}>>{b}.",
    "mul": "Multiplied by {k}: {a}*{k}=<<{a}*{k}={b}>>{b}.",
    "div": "One of {k} piles: {a}/{k}=<<{a}/{k}={b}>>{b}.",
}
PRONOUNS = {"Tom": "he", "Sam": "he", "Ben": "he", "Leo": "he", "Ann": "she", "Mia": "she", "Eva": "she", "Zoe": "she"}


def render(name: str, item: str, start: int, steps: list[Step]) -> dict[str, str]:
    """The GSM8K row: `question`, and `answer` (worked solution, annotations, `#### N`)."""
    he = PRONOUNS[name]
    words = {"he": he, "he_cap": he.capitalize(), "his": "his" if he == "he" else "her", "item": item}
    question = [f"{name} has {start} {item}."]
    solution = [f"{name} starts with {start} {item}."]
    for s in steps:
        question.append(QUESTION[s.op].format(k=s.operand, **words))
        solution.append(SOLUTION[s.op].format(k=s.operand, a=s.before, b=s.after, **words))
    question.append(f"How many {item} does {name} have now?")
    solution.append(f"#### {steps[-1].after}")
    return {"question": " ".join(question), "answer": "\n".join(solution)}


def skeleton(start: int, steps: list[Step]) -> str:
    """The arithmetic without the words: what decides a problem's split."""
    return f"{start}" + "".join(f" {s.op}{s.operand}" for s in steps)


def split_of(skel: str, test_share: float) -> str:
    """'test' for a fixed share of skeletons, by a hash that does not depend on the seed."""
    h = int.from_bytes(hashlib.sha256(skel.encode()).digest()[:8], "big") / 2.0**64
    return "test" if h < test_share else "train"


def problems(seed: int, d: Difficulty) -> Iterator[tuple[str, dict[str, str]]]:
    """An endless stream of (skeleton, row), the same for the same seed and difficulty."""
    rng = random.Random(seed)
    while True:
        name, item = rng.choice(NAMES), rng.choice(ITEMS)
        start, steps = _steps(rng, d)
        yield skeleton(start, steps), render(name, item, start, steps)


def generate(
    n_train: int, n_test: int, seed: int = 0, d: Difficulty = LEVELS["hard"], test_share: float = 0.1
) -> dict[str, list[dict[str, str]]]:
    """`n_train` and `n_test` rows of distinct skeletons, each split drawn from its own share.

    Raises ValueError when the difficulty has too few distinct problems to fill the splits."""
    out: dict[str, list[dict[str, str]]] = {"train": [], "test": []}
    want = {"train": n_train, "test": n_test}
    seen: set[str] = set()
    misses = 0
    for skel, row in problems(seed, d):
        split = split_of(skel, test_share)
        if skel in seen or len(out[split]) >= want[split]:
            misses += 1
            if misses > 100 * (n_train + n_test) + 10_000:
                raise ValueError(f"difficulty too small for {n_train} train and {n_test} test distinct problems")
            if all(len(out[s]) >= want[s] for s in out):
                return out
            continue
        seen.add(skel)
        out[split].append(row)
        if all(len(out[s]) >= want[s] for s in out):
            return out
    raise AssertionError("unreachable: problems() is endless")


def check_disjoint(train: list[dict[str, str]], test: list[dict[str, str]]) -> None:
    """Raise ValueError if any question, or any calculation (the solution's annotations and
    final answer taken together), appears in both splits."""
    from rlsvc.reasoning.answers import calculation

    for key, what in ((lambda r: r["question"], "question"), (lambda r: calculation(r["answer"]), "calculation")):
        shared = {key(r) for r in train} & {key(r) for r in test}
        if shared:
            raise ValueError(f"{len(shared)} {what}s in both train and test, e.g. {sorted(shared)[0]!r}")


def write(rows: dict[str, list[dict[str, str]]], out: Path, parquet: bool = False) -> list[Path]:
    """`out/<split>.jsonl` for each split (train, test, demos when asked), and `.parquet` through
    `datasets` if asked."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for split, split_rows in rows.items():
        path = out / f"{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in split_rows))
        paths.append(path)
        if parquet:
            from datasets import Dataset, disable_progress_bars

            disable_progress_bars()  # one bar per file; the CLI prints the paths instead
            Dataset.from_list(split_rows).to_parquet(str(out / f"{split}.parquet"))
            paths.append(out / f"{split}.parquet")
    return paths


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rlsvc.reasoning.generate", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for train.jsonl and test.jsonl")
    p.add_argument("--train", type=int, default=5000, help="train problems (default 5000)")
    p.add_argument("--test", type=int, default=500, help="test problems (default 500)")
    p.add_argument("--seed", type=int, default=0, help="the generator's seed (default 0)")
    p.add_argument("--level", choices=sorted(LEVELS), default="hard", help="preset difficulty (default hard: 2-4 steps, + - * /)")
    p.add_argument("--min-steps", type=int, help="override the level's fewest operations")
    p.add_argument("--max-steps", type=int, help="override the level's most operations")
    p.add_argument("--max-value", type=int, help="override the level's largest count")
    p.add_argument("--max-start", type=int, help="override the level's largest first count")
    p.add_argument("--max-addend", type=int, help="override the level's largest amount added or given away")
    p.add_argument("--parquet", action="store_true", help="also write train.parquet and test.parquet")
    p.add_argument("--demos", type=int, help="also write demos.jsonl: N more problems, apart from train (a small demonstration set)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    base = LEVELS[args.level]
    names = ("min_steps", "max_steps", "max_value", "max_start", "max_addend")
    overrides = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
    try:
        d = Difficulty(**{**base.__dict__, **overrides})
        if args.train < 1 or args.test < 1:
            raise ValueError("--train and --test: need at least one problem each")
        if args.demos is not None and args.demos < 1:
            raise ValueError(f"--demos: {args.demos}; need at least one problem")
        demos = args.demos or 0
        rows = generate(args.train + demos, args.test, args.seed, d)
        check_disjoint(rows["train"], rows["test"])
        if demos:
            rows = {"train": rows["train"][demos:], "test": rows["test"], "demos": rows["train"][:demos]}
    except ValueError as e:
        print(f"rlsvc.reasoning.generate: {e}", file=sys.stderr)
        return 2
    for path in write(rows, args.out, args.parquet):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
