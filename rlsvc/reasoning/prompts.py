"""Prompt templates for reasoning problems: plain text, or chat messages with an optional system
prompt. The instruction names the final-answer format the strict reward requires.

A plain prompt is `template` formatted with `{question}` and `{instruction}`; a chat prompt is the
same text as the user's message, after the system message when one is set. The chat form is what
`Task.render` returns for a chat model (the tokenizer's chat template is applied downstream).
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from rlsvc.config import Strict
from rlsvc.reasoning.answers import AnswerFormat
from rlsvc.task import Prompt

INSTRUCTIONS: dict[AnswerFormat, str] = {
    "gsm8k": "Solve it step by step, then give the final answer on its own last line as '#### N'.",
    "boxed": "Solve it step by step, then put the final answer in \\boxed{}.",
}


class PromptTemplate(Strict):
    """How a problem becomes the policy's input."""

    style: Literal["plain", "chat"] = "plain"
    """plain: one string; chat: a list of messages ({role, content}) for the model's chat template"""
    template: str = "Question: {question}\n{instruction}\nAnswer:"
    """the prompt (plain) or the user's message (chat); must contain {question}, may contain {instruction}"""
    system: str | None = None
    """chat only: a system message placed first"""
    instruction: str | None = None
    """the final-answer instruction; None takes the answer format's (e.g. "... last line as '#### N'.")"""

    @model_validator(mode="after")
    def _check(self) -> PromptTemplate:
        if "{question}" not in self.template:
            raise ValueError("template must contain {question}")
        if self.system is not None and self.style != "chat":
            raise ValueError("system is for style 'chat' only")
        return self

    def render(self, question: str, answer_format: AnswerFormat = "gsm8k") -> Prompt:
        instruction = INSTRUCTIONS[answer_format] if self.instruction is None else self.instruction
        # replace, not str.format: a question may hold braces ("\\frac{1}{2}")
        text = self.template.replace("{instruction}", instruction).replace("{question}", question)
        if self.style == "plain":
            return text
        messages = [{"role": "system", "content": self.system}] if self.system else []
        return [*messages, {"role": "user", "content": text}]
