"""The supervised job's held-out evaluation (rlsvc/sft/evaluate.py): batched, left-padded greedy
generation gives each prompt's own greedy answer, and answers are scored by the strict rule."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from rlsvc.reasoning.data import Problem
from rlsvc.sft.evaluate import greedy_completions, left_padded, score


def test_left_padding_right_aligns_rows():
    ids, mask = left_padded([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_strict_accuracy_and_its_standard_error():
    problems = [Problem(f"q{i}", f"#### {i}", str(i)) for i in (9, 10, 11, 12)]
    completions = ["3*3=<<3*3=9>>9\n#### 9.0", "#### 11", "the answer is 11", "#### 12"]
    acc = score(completions, problems, "gsm8k")
    assert acc.right == [True, False, False, True]  # lenient-only answers do not count
    assert acc.accuracy == 0.5 and acc.stderr == pytest.approx(math.sqrt(0.25 / 4)) and acc.n == 4
    assert acc.metrics("eval/test")["eval/test/accuracy_stderr"] == acc.stderr


def test_batched_greedy_answers_equal_one_prompt_at_a_time(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlsvc.models.make_tiny_hf import make_tiny_hf

    folder = make_tiny_hf("qwen3", tmp_path / "m", seed=3, init_std=0.1)  # varied greedy continuations
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    texts = ["Ann has 3 pens.", "Bob has 12 coins and gets 7 more. How many coins does he have now?", "4+5="]
    prompts = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    batched = greedy_completions(model, tokenizer, prompts, max_new_tokens=12, batch_size=3)
    alone = [greedy_completions(model, tokenizer, [p], max_new_tokens=12, batch_size=1)[0] for p in prompts]
    assert batched == alone and len(set(alone)) == 3 and all(alone)


def test_evaluation_threads_are_set_inside_the_block_only():
    # In a fresh interpreter: torch's thread count is process state that other tests of a whole
    # suite run (in-process actors, benchmarks) leave behind, and OpenMP's is per thread.
    code = """
import torch
from rlsvc.sft.job import torch_threads
before = torch.get_num_threads()
with torch_threads(1):
    assert torch.get_num_threads() == 1
assert torch.get_num_threads() == before
with torch_threads(None):
    assert torch.get_num_threads() == before
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
