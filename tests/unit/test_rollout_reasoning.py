"""The reasoning-recipe rollout benchmark (benchmarks/rollout_reasoning.py) without its engines:
its defaults are the recipe's configs, its calls are GRPO groups of real generated problems with
the worked solutions' lengths, and its table and suite target read its results."""

from __future__ import annotations

import yaml
from test_benchmarks import SAMPLE

from benchmarks.__main__ import checks
from benchmarks.rollout_reasoning import REPO, encoded_problems, markdown, parser, recipe, workload

TARGET = (
    "rollout useful tokens/s >= 3x eager HF generate (reasoning recipe: tiny Qwen3, generated problems' prompts, "
    "worked-solution lengths, a GRPO step's groups)"
)


def test_the_defaults_are_the_recipes_group_size_groups_and_token_budget():
    rl = yaml.safe_load((REPO / "configs/math_tiny.yaml").read_text())
    sft = yaml.safe_load((REPO / "configs/sft_arith_tiny.yaml").read_text())
    args = parser().parse_args([])
    assert (args.groups, args.group_size) == (rl["grpo"]["groups_per_step"], rl["grpo"]["group_size"])
    assert args.max_tokens == sft["eval"]["max_new_tokens"] == recipe()["max_tokens"]


def test_calls_are_groups_of_real_prompts_with_worked_solution_lengths(tmp_path):
    from transformers import AutoTokenizer

    from rlsvc.models.make_tiny_hf import make_tiny_hf
    from rlsvc.sft.examples import prompt_ids

    tokenizer = AutoTokenizer.from_pretrained(make_tiny_hf("qwen3", tmp_path / "qwen3"))
    problems = encoded_problems(tokenizer, "easy", 50, {})
    first = tokenizer.decode(problems[0][0])
    assert first.startswith("Question: ") and first.endswith("'#### N'.\nAnswer:")  # the SFT config's template
    # a solution's length counts its tokens and the closing eos, as the SFT stage teaches it
    answers = {n for _, n in problems}
    assert all(40 < n < 200 for n in answers) and len(answers) > 1
    args = parser().parse_args(["--groups", "3", "--group-size", "4", "--max-tokens", "85"])
    prompts, lengths = workload(problems, args, 0)
    assert len(prompts) == len(lengths) == 12
    assert all(prompts[g * 4] == prompts[g * 4 + i] for g in range(3) for i in range(4))  # a group shares its prompt
    assert len({tuple(prompts[g * 4]) for g in range(3)}) == 3
    assert all(n <= 85 for n in lengths) and set(lengths) <= answers | {85}
    assert workload(problems, args, 0) == (prompts, lengths) and workload(problems, args, 1) != (prompts, lengths)
    assert prompt_ids(tokenizer, "Question: x") == tokenizer("Question: x", add_special_tokens=False)["input_ids"]  # no bos in Qwen's


def test_the_table_and_the_suite_target_read_the_results():
    text = markdown(SAMPLE["rollout_reasoning"])
    assert "394k parameters" in text and "8 generated `easy` problems x 4 samples" in text
    assert "completions as long as the worked solutions, 81-98 tokens (mean 89), capped at 200" in text
    assert "| **rlsvc / HF, per pair** | **1.50x** (1.40-1.60) |" in text
    met = {target: (measured, ok) for target, measured, ok in checks({"rollout_reasoning": {"data": SAMPLE["rollout_reasoning"]}})}
    assert met[TARGET] == ("1.50x (1.40-1.60)", False)
    assert {target: ok for target, _, ok in checks({})}[TARGET] is None
