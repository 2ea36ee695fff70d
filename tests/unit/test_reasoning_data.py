"""Reasoning datasets through Hugging Face `datasets` (rlsvc/reasoning/data.py): JSONL, Parquet and
splits by name from a local folder (the hub's code path), column mapping, GSM8K's schema as is,
\\boxed{} answers, and every bad input as one line naming the setting and the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlsvc.reasoning.data import DatasetError, DatasetSpec, load_split, load_splits
from rlsvc.task import TaskError

# Two rows in GSM8K's own schema and style (spaces around '=', annotations, a final '#### N').
GSM8K_ROWS = [
    {
        "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May?",
        "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
    },
    {
        "question": "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn?",
        "answer": "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = $<<0.2*50=10>>10.\n#### 10",
    },
]
MATH_ROWS = [{"problem": "What is $1/2$ as a fraction?", "solution": "It is $\\boxed{\\frac{1}{2}}$."}]


def _jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def cache(tmp_path) -> str:
    return str(tmp_path / "hf_cache")


def test_gsm8k_schema_loads_as_is_from_jsonl(tmp_path, cache):
    train = _jsonl(tmp_path / "train.jsonl", GSM8K_ROWS[:1])
    test = _jsonl(tmp_path / "test.jsonl", GSM8K_ROWS[1:])
    splits = load_splits(DatasetSpec(train=train, test=test), cache_dir=cache)
    assert [p.final for p in splits["train"]] == ["72"] and [p.final for p in splits["test"]] == ["10"]
    assert splits["train"][0].solution == GSM8K_ROWS[0]["answer"]


def test_parquet_files_and_splits_by_name_from_a_folder(tmp_path, cache):
    from datasets import Dataset

    folder = tmp_path / "gsm"
    folder.mkdir()
    Dataset.from_list(GSM8K_ROWS[:1]).to_parquet(str(folder / "train.parquet"))
    Dataset.from_list(GSM8K_ROWS[1:]).to_parquet(str(folder / "test.parquet"))
    by_file = load_splits(DatasetSpec(train=str(folder / "train.parquet"), test=str(folder / "test.parquet")), cache_dir=cache)
    by_name = load_splits(DatasetSpec(path=str(folder)), cache_dir=cache)  # load_dataset(path, split=...)
    assert by_file == by_name and by_name["test"][0].final == "10"


def test_mapped_columns_and_boxed_answers(tmp_path, cache):
    spec = DatasetSpec(
        train=_jsonl(tmp_path / "m.jsonl", MATH_ROWS), question_column="problem", answer_column="solution", answer_format="boxed"
    )
    (problem,) = load_split(spec, "train", cache_dir=cache)
    assert problem.question == MATH_ROWS[0]["problem"] and problem.final == "\\frac{1}{2}"
    final_only = DatasetSpec(train=_jsonl(tmp_path / "f.jsonl", [{"question": "q", "answer": " 7 "}]), answer_is_final=True)
    assert load_split(final_only, "train", cache_dir=cache)[0].final == "7"


def _error(spec: DatasetSpec, cache: str, setting: str = "data") -> str:
    with pytest.raises(DatasetError) as info:
        load_splits(spec, setting=setting, cache_dir=cache)
    message = str(info.value)
    assert "\n" not in message and isinstance(info.value, TaskError)  # python -m rlsvc.train: exit 2
    return message


def test_bad_input_is_one_line_naming_the_setting_and_the_file(tmp_path, cache):
    good = _jsonl(tmp_path / "train.jsonl", GSM8K_ROWS[:1])
    test = _jsonl(tmp_path / "test.jsonl", GSM8K_ROWS[1:])
    missing = str(tmp_path / "nope.jsonl")
    assert _error(DatasetSpec(train=missing, test=test), cache, "env.options.data") == f"env.options.data.train: no such file: {missing}"
    msg = _error(DatasetSpec(train=good, test=test, question_column="prompt"), cache)
    assert msg.startswith("data.question_column: no column 'prompt' in ") and good in msg and "question, answer" in msg
    empty = tmp_path / "empty.parquet"
    from datasets import Dataset

    Dataset.from_dict({"question": [], "answer": []}).to_parquet(str(empty))
    assert _error(DatasetSpec(train=good, test=str(empty)), cache) == f"data.test: {empty} has no rows"
    blank = tmp_path / "blank.jsonl"
    blank.write_text("")
    assert _error(DatasetSpec(train=str(blank), test=test), cache) == f"data.train: {blank} has no rows"
    msg = _error(DatasetSpec(train=good, test=test, answer_format="boxed"), cache)
    assert msg.startswith("data.answer_format: 1 of 1 rows of ") and good in msg
    overlap = _jsonl(tmp_path / "overlap.jsonl", [{**GSM8K_ROWS[0], "question": GSM8K_ROWS[0]["question"].upper() + "  "}])
    msg = _error(DatasetSpec(train=good, test=overlap), cache)
    assert msg.startswith("data.test: 1 questions of ") and overlap in msg and good in msg


def test_unknown_split_names_and_unloadable_files_are_named(tmp_path, cache):
    folder = tmp_path / "gsm"
    folder.mkdir()
    _jsonl(folder / "train.jsonl", GSM8K_ROWS[:1])
    _jsonl(folder / "test.jsonl", GSM8K_ROWS[1:])
    msg = _error(DatasetSpec(path=str(folder), test="validation"), cache)
    assert msg.startswith(f"data.test: cannot load {folder} (split validation)") and "Unknown split" in msg
    msg = _error(DatasetSpec(train="train"), cache)
    assert msg.startswith("data.train: 'train' is not a .jsonl") and "data.path" in msg
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"question": "q", "answer": "#### 1"}\n{not json\n')
    assert _error(DatasetSpec(train=str(broken), test=str(broken)), cache).startswith(f"data.train: cannot load {broken}")


def test_the_generated_problems_load_and_their_solutions_score_as_right(tmp_path, cache):
    from rlsvc.reasoning.generate import generate, write
    from rlsvc.reasoning.rewards import ReasoningReward

    write(generate(300, 40), tmp_path / "arith")
    splits = load_splits(DatasetSpec(path=str(tmp_path / "arith")), cache_dir=cache)
    assert len(splits["train"]) == 300 and len(splits["test"]) == 40
    reward = ReasoningReward()
    assert all(reward(p.solution, p.final).strict for p in splits["test"])
    assert not any(reward(p.solution.rsplit("####", 1)[0], p.final).strict for p in splits["test"])  # no final line, no pay
