"""The built-in reasoning task (env.type=reasoning, rlsvc/tasks/reasoning.py): problems from the
train split, the test split held out, prompts from the template, math-verify rewards through the
real OpenEnv environment, per-step metrics, the loop's task-independent metrics, data errors as
one line with exit 2 before any cluster, and relative data paths resolved in the driver."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rlsvc.config import load_config
from rlsvc.episode import Episode
from rlsvc.loop import response_metrics, zero_variance_group_rate
from rlsvc.reasoning.rewards import Score
from rlsvc.tasks.reasoning import ReasoningTask, outcome_of
from rlsvc.tasks.registry import load_task
from rlsvc.train import main

TRAIN = [
    {"question": "Tom has 3 apples and gets 4 more. How many apples does Tom have?", "answer": "3+4=<<3+4=7>>7\n#### 7"},
    {"question": "Ann has 5 pens and gives 2 away. How many pens does Ann have?", "answer": "5-2=<<5-2=3>>3\n#### 3"},
]
TEST = [
    {"question": "Sam has 2 boxes of 6 eggs. How many eggs?", "answer": "2*6=<<2*6=12>>12\n#### 12"},
    {"question": "Mia has 9 cards and 1 more. How many cards?", "answer": "9+1=<<9+1=10>>10\n#### 10"},
    {"question": "Leo has 8 coins and halves them. How many coins?", "answer": "8/2=<<8/2=4>>4\n#### 4"},
]
TINY = ["env.type=reasoning", "model.titan.tokenizer=chars", "model.titan.vocab_size=128", "model.titan.max_seq_len=512"]


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def data(tmp_path) -> list[str]:
    """Overrides pointing env.data at a small GSM8K-schema train and test split."""
    return [f"env.data.train={write_jsonl(tmp_path / 'train.jsonl', TRAIN)}", f"env.data.test={write_jsonl(tmp_path / 'test.jsonl', TEST)}"]


def task_of(*overrides: str) -> ReasoningTask:
    task = load_task(load_config(None, [*TINY, *overrides]).env)
    assert isinstance(task, ReasoningTask)
    return task


def test_train_problems_test_held_out_and_the_prompt_template(data):
    task = task_of(*data)
    assert [p.final for p in task.problems] == ["7", "3"]
    assert [p.final for p in task.held_out(100, seed=1)] == ["12", "10", "4"]  # the whole split, in order
    sample = task.held_out(2, seed=1)
    assert len(sample) == 2 and sample == task.held_out(2, seed=1) and {p.final for p in sample} <= {"12", "10", "4"}
    assert (
        task.prompt(task.problem(1))
        == f"Question: {TRAIN[1]['question']}\nSolve it step by step, then give the final answer on its own last line as '#### N'.\nAnswer:"
    )
    assert not task.chat and task.has("evaluate")

    cfg = load_config(None, ["env.type=reasoning", "model.source=hf", "model.path=tiny:qwen3", *data, "env.prompt.style=chat"])
    cfg.env.prompt.system, cfg.env.prompt.template = "Be brief.", "{question}"
    chat = load_task(cfg.env)
    assert chat.chat and chat.prompt(chat.problem(0)) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": TRAIN[0]["question"]},
    ]


def step(task: ReasoningTask, seed: int, answer: str) -> tuple[float, str]:
    spec = task.env_spec()
    env = spec.env_factory()
    env.reset(seed=seed)
    obs = env.step(spec.action_cls(**spec.payload(answer)))
    assert obs.done
    return obs.reward, obs.outcome


def test_the_environment_scores_strict_lenient_format_and_malformed(data):
    task = task_of(*data)
    assert step(task, 0, "3 plus 4 is 7.\n#### 7") == (1.0, "correct")
    assert step(task, 0, "#### 8") == (0.0, "wrong")
    assert step(task, 0, "The answer is 7.") == (0.0, "lenient_unformatted")  # right, but not as '#### N'
    assert step(task, 0, "I do not know") == (0.0, "malformed")
    assert step(task, 0, "\\boxed{") == (0.0, "malformed")  # the verifier reads nothing; it never raises
    assert task.reward.counts["malformed"] == 2

    lenient = task_of(*data, "env.reward=lenient", "env.format_reward=0.25")
    assert step(lenient, 0, "The answer is 7.") == (1.0, "lenient_unformatted")
    assert step(lenient, 0, "#### 8") == (0.25, "wrong")  # format shaping, right or wrong
    assert step(lenient, 0, "#### 7") == (1.25, "correct")


def test_every_score_has_one_outcome():
    def score(strict: bool, lenient: bool, formatted: bool, malformed: bool = False) -> str:
        return outcome_of(Score(0.0, strict=strict, lenient=lenient, formatted=formatted, malformed=malformed))

    assert score(True, True, True) == "correct"
    assert score(False, True, True) == "lenient_formatted"
    assert score(False, True, False) == "lenient_unformatted"
    assert score(False, False, True) == "wrong"
    assert score(False, False, False) == "unformatted_wrong"
    assert score(False, False, False, malformed=True) == "malformed"


def test_metrics_read_strict_and_lenient_accuracy_format_rate_and_malformed_count(data):
    task = task_of(*data)
    outcomes = ["correct", "lenient_formatted", "lenient_unformatted", "wrong", "unformatted_wrong", "malformed", "malformed", "truncated"]
    m = task.metrics([Episode(group_id=0, policy_version=0, outcome=o) for o in outcomes])
    assert m["strict_accuracy"] == 1 / 8 and m["lenient_accuracy"] == 3 / 8 and m["format_rate"] == 3 / 8
    assert m["malformed_count"] == 2.0 and m["malformed_rate"] == 2 / 8 and m["truncated_rate"] == 1 / 8


def test_loop_metrics_zero_variance_groups_and_response_lengths():
    def ep(group: int, reward: float, lengths: list[int], failed: bool = False) -> Episode:
        return Episode(group_id=group, policy_version=0, reward=reward, responses=[[1] * n for n in lengths], failed=failed)

    episodes = [ep(0, 1.0, [4]), ep(0, 1.0, [8]), ep(1, 0.0, [8]), ep(1, 1.0, [2]), ep(2, 0.0, [3]), ep(2, 0.0, [3], failed=True)]
    assert zero_variance_group_rate(episodes) == 0.5  # group 0 flat, group 1 not, group 2 left out (failed)
    assert zero_variance_group_rate([]) == 0.0
    m = response_metrics(episodes, max_tokens=8)
    assert m == {"response_len_mean": 28 / 6, "response_len_max": 8.0, "response_truncated_rate": 2 / 6}
    assert response_metrics(episodes, None)["response_truncated_rate"] == 0.0


def run_dry(capsys, *overrides: str) -> tuple[int, str]:
    code = main(["--dry-run", *TINY, *overrides])
    return code, capsys.readouterr().err


def test_data_errors_are_one_line_naming_the_setting_and_the_file_before_any_cluster(tmp_path, data, capsys):
    assert run_dry(capsys, *data)[0] == 0
    missing = tmp_path / "nope.jsonl"
    code, err = run_dry(capsys, f"env.data.train={missing}", data[1])
    assert code == 2 and err.count("\n") == 1 and "env.data.train" in err and str(missing) in err, err
    bare = write_jsonl(tmp_path / "bare.jsonl", [{"question": "q?", "answer": "7"}])
    code, err = run_dry(capsys, f"env.data.train={bare}", data[1])
    assert code == 2 and err.count("\n") == 1 and "env.data.answer_format" in err and bare in err, err
    code, err = run_dry(capsys, data[0], "env.data.question_column=problem", data[1])
    assert code == 2 and err.count("\n") == 1 and "env.data.question_column" in err and "'problem'" in err, err
    code, err = run_dry(capsys, data[0], f"env.data.test={data[0].split('=', 1)[1]}")  # the same file: overlap
    assert code == 2 and err.count("\n") == 1 and "env.data.test" in err, err


def test_config_errors_of_the_section(capsys, data):
    code, err = run_dry(capsys, *data, "env.prompt.style=chat")
    assert code == 2 and "env.prompt.style=chat needs a chat model" in err
    code, err = run_dry(capsys, *data, "model.titan.tokenizer=blackjack", "model.titan.vocab_size=64")
    assert code == 2 and "env.type=reasoning needs model.titan.tokenizer=chars or bytes" in err
    code, err = run_dry(capsys, *data, "env.reward=exact")
    assert code == 2 and err.startswith("rlsvc.train: config error: env.reward:")


def test_relative_data_paths_are_resolved_where_the_config_is_read(tmp_path, monkeypatch):
    write_jsonl(tmp_path / "train.jsonl", TRAIN)
    write_jsonl(tmp_path / "test.jsonl", TEST)
    monkeypatch.chdir(tmp_path)
    cfg = load_config(None, [*TINY, "env.data.train=train.jsonl", "env.data.test=./test.jsonl"])
    assert cfg.env.data.train == str(tmp_path / "train.jsonl") and cfg.env.data.test == str(tmp_path / "test.jsonl")
    monkeypatch.chdir(os.sep)  # an actor in another working directory loads the same files
    assert [p.final for p in load_task(cfg.env).problems] == ["7", "3"]
