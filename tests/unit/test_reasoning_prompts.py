"""Prompt templates for reasoning problems (rlsvc/reasoning/prompts.py): plain and chat, an optional
system prompt, the final-answer instruction of each format, and templates checked at load."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rlsvc.reasoning.prompts import INSTRUCTIONS, PromptTemplate


def test_plain_prompt_holds_the_question_and_the_formats_instruction():
    text = PromptTemplate().render("Tom has 3 pens. How many?")
    assert text == f"Question: Tom has 3 pens. How many?\n{INSTRUCTIONS['gsm8k']}\nAnswer:"
    assert "#### N" in text
    boxed = PromptTemplate(template="{question} {instruction}").render("What is $\\frac{1}{2}$?", "boxed")
    assert boxed == "What is $\\frac{1}{2}$? Solve it step by step, then put the final answer in \\boxed{}."


def test_chat_prompt_is_messages_with_an_optional_system_prompt():
    chat = PromptTemplate(style="chat", template="{question}", instruction="")
    assert chat.render("q?") == [{"role": "user", "content": "q?"}]
    with_system = PromptTemplate(style="chat", system="You are a careful solver.")
    messages = with_system.render("q?")
    assert messages[0] == {"role": "system", "content": "You are a careful solver."}
    assert messages[1]["role"] == "user" and messages[1]["content"].startswith("Question: q?\n")


def test_bad_templates_are_refused_at_load():
    with pytest.raises(ValidationError, match=r"must contain \{question\}"):
        PromptTemplate(template="no placeholder")
    with pytest.raises(ValidationError, match="chat"):
        PromptTemplate(system="only for chat")
    with pytest.raises(ValidationError, match="style"):
        PromptTemplate(style="markdown")


def test_the_reasoning_modules_load_no_heavy_library_at_import():
    import subprocess
    import sys

    modules = "rlsvc.reasoning.generate, rlsvc.reasoning.data, rlsvc.reasoning.rewards, rlsvc.reasoning.prompts, rlsvc.algo.variants"
    heavy = "('datasets', 'math_verify', 'sympy', 'pyarrow', 'ray', 'vllm')"
    probe = f"import sys, {modules}; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr
