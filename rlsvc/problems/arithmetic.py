"""Seeded arithmetic word problems with integer answers (same seed, same problem)."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

NAMES = ["Ada", "Bo", "Cy", "Dee", "Eli", "Fay", "Gus", "Hal", "Ivy", "Jo"]
THINGS = ["apples", "books", "coins", "marbles", "pens", "stamps", "shells", "cards"]


@dataclass(frozen=True)
class ArithmeticProblem:
    seed: int
    prompt: str
    answer: int


def arithmetic_problem(seed: int) -> ArithmeticProblem:
    rng = random.Random(seed)
    name, other = rng.sample(NAMES, 2)
    thing = rng.choice(THINGS)
    kind = rng.randrange(5)
    a, b, c = rng.randint(2, 60), rng.randint(2, 40), rng.randint(2, 9)
    if kind == 0:
        prompt, answer = f"{name} has {a} {thing} and gets {b} more. How many {thing} does {name} have now?", a + b
    elif kind == 1:
        a = a + b
        prompt, answer = f"{name} has {a} {thing} and gives {b} to {other}. How many {thing} does {name} have left?", a - b
    elif kind == 2:
        prompt, answer = f"{name} buys {c} boxes with {b} {thing} in each. How many {thing} is that?", b * c
    elif kind == 3:
        total = b * c
        prompt, answer = f"{name} shares {total} {thing} equally among {c} friends. How many {thing} does each friend get?", b
    else:
        prompt, answer = (
            (f"{name} has {a} {thing}, buys {c} packs of {b}, then gives {other} {a // 2}. How many {thing} does {name} have?"),
            a + b * c - a // 2,
        )
    return ArithmeticProblem(seed, prompt, answer)


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def parse_number(text: str) -> float | None:
    """The last number in `text` (an answer like 'ANSWER: 42' or '42 apples'), or None."""
    found = _NUMBER.findall(text.replace(",", ""))
    return float(found[-1]) if found else None
