"""Prompt templates for reasoning problems: plain text, or chat messages with an optional system
prompt. The instruction names the final-answer format the strict reward requires.

A plain prompt is `template` formatted with `{question}` and `{instruction}`; a chat prompt is the
same text as the user's message, after the system message when one is set. The chat form is what
`Task.render` returns for a chat model (the tokenizer's chat template is applied downstream).
"""

from __future__ import annotations

from rlsvc.config import PromptTemplate
from rlsvc.reasoning.answers import INSTRUCTIONS

__all__ = ["INSTRUCTIONS", "PromptTemplate"]
