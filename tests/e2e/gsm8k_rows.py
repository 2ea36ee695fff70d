"""GSM8K-schema rows (calculator annotations `<<...>>`, answers ending `#### N`) for the
reasoning task's end-to-end tests (tests/e2e/test_reasoning_test_eval.py)."""

from __future__ import annotations

TEMPLATES = [  # GSM8K's own style: spaces around '=', an annotation per step, '#### N' last
    ("{a} has {x} apples and buys {y} more. How many apples does {a} have?", "{a} has {x} + {y} = <<{x}+{y}={s}>>{s} apples.\n#### {s}"),
    ("{a} reads {x} pages a day for {y} days. How many pages does {a} read?", "{a} reads {x} * {y} = <<{x}*{y}={p}>>{p} pages.\n#### {p}"),
]


def gsm8k_rows(start: int, n: int) -> list[dict[str, str]]:
    rows = []
    for i in range(start, start + n):
        question, answer = TEMPLATES[i % 2]
        values = {"a": ("Ann", "Tom", "Mia")[i % 3], "x": 2 + i, "y": 3 + i % 5, "s": 5 + i + i % 5, "p": (2 + i) * (3 + i % 5)}
        rows.append({"question": question.format(**values), "answer": answer.format(**values)})
    return rows
