"""A tool-calling task: arithmetic the policy answers with a `calculate` tool.

Problem `seed`: "What is a * b + c?" (a, b of two digits). The policy may call
`calculate(expression)` (integer arithmetic: + - * // % and parentheses; anything else is the
tool's error, returned to the policy), then answers in a reply without calls; the last integer
in that reply scores 1 when it is the value, else 0. Select it with
`env.task=rlsvc.tasks.calculator:CalculatorTask` and a chat model whose tokenizer has a tool
template (rlsvc/tools/tiny.py for the tiny checkpoints).
"""

from __future__ import annotations

import ast
import operator
import random
import re
from typing import Any

from rlsvc.tools.schema import ToolCall, ToolReply, function
from rlsvc.tools.task import ToolTask

_OPS: dict[type, Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


def calculate(expression: str) -> int:
    """The value of an integer arithmetic expression; ValueError for anything else."""
    if len(expression) > 200:
        raise ValueError("expression longer than 200 characters")

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = value(node.left), value(node.right)
            if abs(left) > 10**12 or abs(right) > 10**12:
                raise ValueError("number too large")
            return int(_OPS[type(node.op)](left, right))
        raise ValueError(f"not integer arithmetic: {ast.unparse(node)}")

    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as e:
        raise ValueError(f"cannot read {expression!r}: {e.msg}") from None
    return value(tree.body)


class CalculatorTask(ToolTask):
    name = "calculator"
    tools = [
        function(
            "calculate",
            "Evaluate an integer arithmetic expression (+ - * // % and parentheses).",
            {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
        )
    ]

    def __init__(self, tool_parser: str = "auto") -> None:
        self.tool_parser = tool_parser

    def problem(self, seed: int) -> dict[str, Any]:
        rng = random.Random(seed)
        a, b, c = rng.randint(10, 99), rng.randint(10, 99), rng.randint(1, 99)
        return {"question": f"What is {a} * {b} + {c}?", "expression": f"{a}*{b}+{c}", "value": a * b + c}

    def prompt(self, problem: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "user", "content": problem["question"]}]

    def call(self, problem: dict[str, Any], name: str, arguments: dict[str, Any]) -> str:
        return str(calculate(arguments["expression"]))

    def demonstration(self, problem: dict[str, Any]) -> ToolReply:
        return ToolReply("", (ToolCall("calculate", {"expression": problem["expression"]}),))

    def final_answer(self, problem: dict[str, Any]) -> str:
        return str(problem["value"])

    def score(self, problem: dict[str, Any], answer: str) -> float:
        numbers = re.findall(r"-?\d+", answer)
        return float(bool(numbers) and int(numbers[-1]) == problem["value"])
