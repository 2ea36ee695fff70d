"""Final answers as text: the required format (strict) and the calculator annotations.

Two answer formats, each a rule a completion either follows or does not:
- `gsm8k`: a line `#### N` (GSM8K's; the last such line counts), N a number such as `72`,
  `-3`, `1,000` or `2.5`;
- `boxed`: `\\boxed{...}` (MATH's; the last one counts, braces balanced).

These rules are plain regular expressions and a brace matcher rather than math-verify's
extraction on purpose: the strict format is a definition the reward pays for, and it must be
exactly this rule. Equivalence of the extracted answer with the reference, and the lenient
extraction, are math-verify's (`rlsvc/reasoning/rewards.py`). Standard library only.
"""

from __future__ import annotations

import re
from typing import Literal

AnswerFormat = Literal["gsm8k", "boxed"]

# GSM8K's own strict rule (lm-eval's `strict-match`, verl's gsm8k scorer): '#### ' then a number.
GSM8K_FINAL = re.compile(r"####\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)")
ANNOTATION = re.compile(r"<<([^<>]*)>>")
MAX_ANSWER_CHARS = 200
"""An extracted answer longer than this is not an answer (and would cost the verifier time)."""
INSTRUCTIONS: dict[AnswerFormat, str] = {
    "gsm8k": "Solve it step by step, then give the final answer on its own last line as '#### N'.",
    "boxed": "Solve it step by step, then put the final answer in \\boxed{}.",
}
"""What a prompt tells the policy about each answer format (the rule the strict reward pays for)."""


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` with balanced braces, or None."""
    start = text.rfind("\\boxed{")
    while start != -1:
        depth, i = 1, start + len("\\boxed{")
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start + len("\\boxed{") : i - 1].strip()
        start = text.rfind("\\boxed{", 0, start)
    return None


def extract_strict(text: str, fmt: AnswerFormat) -> str | None:
    """The final answer in the required format, or None when the text does not follow it."""
    if fmt == "gsm8k":
        found = GSM8K_FINAL.findall(text)
        answer = found[-1].replace(",", "") if found else None
    else:
        answer = last_boxed(text)
    if not answer or len(answer) > MAX_ANSWER_CHARS:
        return None
    return answer


def calculation(answer: str) -> str:
    """The arithmetic of a worked GSM8K solution: its annotations and final answer, without words."""
    return " ".join(ANNOTATION.findall(answer)) + f" #### {extract_strict(answer, 'gsm8k')}"
