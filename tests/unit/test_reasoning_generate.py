"""The shipped problem generator (rlsvc/reasoning/generate.py): GSM8K's format, right arithmetic,
the same bytes for the same seed, train and test disjoint by construction, and its CLI."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from rlsvc.reasoning.answers import ANNOTATION, calculation, extract_strict
from rlsvc.reasoning.generate import LEVELS, Difficulty, check_disjoint, generate, main

# The default 5,000/500 split's digest: a change to the generator's output must be deliberate.
DEFAULT_DIGEST = "b2e475549d299c9c01e81f17989e7ddda47d84320f7f34d24731af3533f7fd70"


@pytest.fixture(scope="module")
def default_rows() -> dict[str, list[dict[str, str]]]:
    return generate(5000, 500)


def test_default_split_is_the_documented_size_and_deterministic(default_rows):
    assert len(default_rows["train"]) == 5000 and len(default_rows["test"]) == 500
    digest = hashlib.sha256(json.dumps(default_rows, sort_keys=True).encode()).hexdigest()
    assert digest == DEFAULT_DIGEST
    assert generate(50, 5, seed=1) == generate(50, 5, seed=1) != generate(50, 5, seed=2)


def test_rows_are_gsm8k_format_with_right_arithmetic(default_rows):
    ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a // b}
    for row in default_rows["train"][:500] + default_rows["test"]:
        assert set(row) == {"question", "answer"} and row["question"].endswith("have now?")
        lines = row["answer"].split("\n")
        notes = ANNOTATION.findall(row["answer"])
        assert 2 <= len(notes) <= 4 and lines[-1].startswith("#### ")
        value = None
        for note in notes:
            a, op, b, c = re.fullmatch(r"(\d+)([-+*/])(\d+)=(\d+)", note).groups()
            assert value is None or int(a) == value  # each step starts from the last result
            assert ops[op](int(a), int(b)) == int(c) and (op != "/" or int(a) % int(b) == 0)
            assert 0 <= int(c) <= 200
            value = int(c)
        assert extract_strict(row["answer"], "gsm8k") == str(value)


def test_train_and_test_share_no_question_and_no_calculation(default_rows):
    check_disjoint(default_rows["train"], default_rows["test"])
    calcs = {calculation(r["answer"]) for r in default_rows["train"]}
    assert len(calcs) == 5000  # distinct within a split too
    with pytest.raises(ValueError, match="1 questions in both"):
        check_disjoint(default_rows["train"][:3], default_rows["train"][2:4])


def test_difficulty_knobs_bound_steps_ops_and_numbers():
    rows = generate(200, 20, d=LEVELS["easy"])
    for row in rows["train"]:
        notes = ANNOTATION.findall(row["answer"])
        assert len(notes) == 2 and not any(c in n for n in notes for c in "*/")
    small = Difficulty(min_steps=3, max_steps=3, max_value=30)
    for row in generate(100, 10, d=small)["train"]:
        notes = ANNOTATION.findall(row["answer"])
        assert len(notes) == 3 and all(int(n.split("=")[1]) <= 30 for n in notes)
    with pytest.raises(ValueError, match="min_steps"):
        Difficulty(min_steps=3, max_steps=2)
    with pytest.raises(ValueError, match="ops"):
        Difficulty(ops=("pow",))


def test_a_difficulty_too_small_for_the_split_is_refused():
    tiny = Difficulty(min_steps=1, max_steps=1, max_start=2, max_addend=1, max_factor=2, max_value=3, ops=("add",))
    with pytest.raises(ValueError, match="too small"):
        generate(50, 5, d=tiny)


def test_cli_writes_jsonl_and_parquet_and_refuses_bad_knobs(tmp_path, capsys):
    assert main(["--out", str(tmp_path), "--train", "40", "--test", "6", "--level", "medium", "--parquet"]) == 0
    train = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert len(train) == 40 and train == generate(40, 6, d=LEVELS["medium"])["train"]
    from datasets import load_dataset

    parquet = load_dataset("parquet", data_files=str(tmp_path / "test.parquet"), split="train", cache_dir=str(tmp_path / "cache"))
    assert parquet.to_list() == generate(40, 6, d=LEVELS["medium"])["test"]
    capsys.readouterr()
    assert main(["--out", str(tmp_path), "--min-steps", "5", "--max-steps", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "min_steps" in err


def test_cli_overrides_the_levels_number_ranges(tmp_path):
    args = ["--train", "60", "--test", "6", "--level", "easy", "--max-start", "50", "--max-addend", "40", "--max-value", "120"]
    assert main(["--out", str(tmp_path), *args]) == 0
    wide = Difficulty(min_steps=2, max_steps=2, ops=("add", "sub"), max_start=50, max_addend=40, max_value=120)
    train = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert train == generate(60, 6, d=wide)["train"] != generate(60, 6, d=LEVELS["easy"])["train"]


def test_cli_writes_demos_apart_from_train_and_test_and_refuses_none(tmp_path, capsys):
    assert main(["--out", str(tmp_path), "--train", "30", "--test", "4", "--level", "easy", "--demos", "12"]) == 0
    read = lambda name: [json.loads(line) for line in (tmp_path / name).read_text().splitlines()]  # noqa: E731
    dealt = generate(42, 4, d=LEVELS["easy"])
    assert read("demos.jsonl") == dealt["train"][:12] and read("train.jsonl") == dealt["train"][12:]
    assert read("test.jsonl") == dealt["test"]
    questions = [{r["question"] for r in read(f"{split}.jsonl")} for split in ("demos", "train", "test")]
    assert [len(q) for q in questions] == [12, 30, 4] and not (questions[0] & questions[1] or questions[0] & questions[2])
    capsys.readouterr()
    assert main(["--out", str(tmp_path / "x"), "--train", "30", "--test", "4", "--demos", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--demos" in err and not (tmp_path / "x").exists()
