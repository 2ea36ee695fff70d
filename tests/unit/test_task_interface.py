"""The task interface (rlsvc/task.py) and how a config finds its task: built-ins by env.type, a
third-party task by import path or by entry point, each failure one line and exit 2 before any
cluster starts; the loop's task-generic helpers (greedy choice, warm-start batches)."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rlsvc.config import load_config
from rlsvc.loop import choose_greedy, warm_start_batches
from rlsvc.models.tokenizer import PAD_ID, build_tokenizer
from rlsvc.policy_io import TaskCodec
from rlsvc.task import Task, TaskError
from rlsvc.tasks.blackjack import BlackjackTask
from rlsvc.tasks.code import CodeTask
from rlsvc.tasks.registry import load_task
from rlsvc.train import task_for

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "qa_task"


@pytest.fixture
def example_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))


def entry_point_dir(tmp_path: Path) -> Path:
    """What `pip install examples/qa_task` leaves for importlib.metadata: a dist-info folder
    declaring the entry point (the package itself is found on the path)."""
    info = tmp_path / "rlsvc_qa_task-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlsvc-qa-task\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[rlsvc.tasks]\nqa = rlsvc_qa.task:QATask\n")
    return tmp_path


def test_builtin_tasks_by_env_type():
    assert isinstance(load_task(load_config(None, []).env), BlackjackTask)
    bj = load_task(load_config(None, ["env.then_stick_at=17"]).env)
    assert bj.then_stick_at == 17
    code = load_task(load_config("configs/code_tiny.yaml").env)
    assert isinstance(code, CodeTask) and code.settings.max_turns == 3


def test_a_task_by_import_path_and_by_entry_point(example_on_path, tmp_path, monkeypatch):
    by_path = load_task(load_config(None, ["env.task=rlsvc_qa.task:QATask"]).env)
    assert by_path.name == "qa" and by_path.answers() == [str(d) for d in range(10)]
    monkeypatch.syspath_prepend(str(entry_point_dir(tmp_path)))
    by_name = load_task(load_config(None, ["env.task=qa", 'env.options={answers: ["1", "2"]}']).env)
    assert type(by_name).__name__ == "QATask" and by_name.answers() == ["1", "2"]


@pytest.mark.parametrize(
    "override, message",
    [
        ("env.task=no_such_task", "env.task: no task named 'no_such_task' (entry points in group rlsvc.tasks: "),
        ("env.task=no_such_module:make", "env.task: cannot import no_such_module"),
        ("env.task=os:no_such_factory", "env.task: os has no attribute no_such_factory"),
        ("env.task=os:getcwd", "env.task: os:getcwd returned str, not an rlsvc.task.Task"),
        ("env.task=os:sep", "env.task: os:sep is not callable"),
    ],
)
def test_bad_task_names_are_one_line_errors(override, message):
    with pytest.raises(TaskError) as err:
        task_for(load_config(None, [override]))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_options_the_factory_does_not_take(example_on_path):
    with pytest.raises(TaskError, match=r"env.options: rlsvc_qa.task:QATask does not accept \['colour'\]"):
        task_for(load_config(None, ["env.task=rlsvc_qa.task:QATask", "env.options={colour: red}"]))


def test_settings_that_use_a_missing_hook(example_on_path):
    """The QA task validates and (single-turn, with held-out questions) evaluates its saved policy,
    but has no warm start: left at its default that setting is switched off; asked for
    explicitly, it is an error."""
    cfg = load_config(None, ["env.task=rlsvc_qa.task:QATask"])
    task_for(cfg)
    assert (cfg.model.warm_start_steps, cfg.eval.episodes, cfg.eval.every_steps) == (0, 20000, 10)
    with pytest.raises(TaskError, match="model.warm_start_steps: task qa has no warm_start_examples hook; set it to 0"):
        task_for(load_config(None, ["env.task=rlsvc_qa.task:QATask", "model.warm_start_steps=5"]))
    assert all(BlackjackTask().has(h) for h in ("warm_start_examples", "validate", "evaluate"))
    assert not any(CodeTask().has(h) for h in ("warm_start_examples", "validate", "evaluate"))


def test_the_cli_refuses_a_bad_task_before_any_cluster(tmp_path):
    for override, expected in (
        ("env.task=no_such_task", "no task named 'no_such_task'"),
        ("env.task=os:getcwd", "not an rlsvc.task.Task"),
        ("env.remote.url=http://127.0.0.1:9", "env.remote.url: "),
    ):
        out = subprocess.run(
            [sys.executable, "-m", "rlsvc.train", override, "env.remote.connect_timeout_s=2", f"run.output_dir={tmp_path}"],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        assert out.returncode == 2, out.stderr
        assert out.stderr.startswith("rlsvc.train: ") and expected in out.stderr and out.stderr.count("\n") == 1, out.stderr
    assert not list(tmp_path.iterdir())  # no run folder: refused before the job began


class _ToyTask(Task):
    """Observations are numbers; answers are words of different token lengths."""

    def env_spec(self):  # never served: these tests exercise only the codec and the loop's helpers
        raise AssertionError("the toy task has no environment")

    def render(self, observation):
        return f"n {observation.n} ?"

    def parse(self, text):
        return text.strip() or None

    def answers(self):
        return ["ab", "c"]

    def warm_start_examples(self, rng, n):
        return [(SimpleNamespace(n=rng.randint(0, 99)), rng.choice(self.answers())) for _ in range(n)]


def test_greedy_choice_sums_each_answers_token_logprobs():
    """A made-up policy that likes answer tokens close to the first digit of the prompt: every
    token of an answer counts, so "22" wins after "n 22 ?" although each of its tokens alone is
    no better than "1"'s."""
    codec = TaskCodec(_ToyTask(), build_tokenizer("chars"))
    obs = [SimpleNamespace(n=1), SimpleNamespace(n=22)]
    digit_at = len(codec.bos) + 2  # "n <digit>..."

    def logprobs(ids):
        return -((ids - ids[:, digit_at : digit_at + 1]) ** 2).float()

    assert choose_greedy(codec, logprobs, obs, ["1", "22"]) == [0, 1]
    assert choose_greedy(codec, logprobs, obs, ["22", "1"]) == [1, 0]
    assert choose_greedy(codec, lambda ids: torch.zeros(ids.shape), obs, ["c", "c"]) == [1, 1]  # ties: the last


def test_warm_start_batches_mask_only_the_answer_tokens():
    codec = TaskCodec(_ToyTask(), build_tokenizer("chars"))
    [(ids, mask)] = list(warm_start_batches(codec, seed=3, steps=1, batch_size=16))
    rng = random.Random(3)
    for row, m, (obs, answer) in zip(ids, mask, _ToyTask().warm_start_examples(rng, 16)):
        prompt, ans = codec.encode(obs), codec.answer_ids(answer)
        assert row[: len(prompt) + len(ans)].tolist() == prompt + ans
        assert (row[len(prompt) + len(ans) :] == PAD_ID).all()
        assert m.nonzero().flatten().tolist() == list(range(len(prompt), len(prompt) + len(ans)))


def test_blackjack_warm_start_is_hit_or_stand_after_the_prompt():
    codec = TaskCodec(BlackjackTask(), build_tokenizer("blackjack"))
    [(ids, mask)] = list(warm_start_batches(codec, seed=0, steps=1, batch_size=64))
    assert (mask.sum(dim=1) == 1).all() and set(ids[mask.bool()].tolist()) == set(codec.allowed_token_ids)


def test_observations_cross_ray_as_their_fields():
    """What an env actor sends the driver (rlsvc/envs/plain.py): the fields by name, pickled
    without OpenEnv's classes; nested models dump as pydantic's would; failures pass as they are."""
    import pickle

    from pydantic import BaseModel

    from rlsvc.envs.blackjack import BlackjackObservation
    from rlsvc.envs.plain import PlainObservation, plain
    from rlsvc.episode import FailedObservation
    from rlsvc.tasks.blackjack import BlackjackTask

    obs = BlackjackObservation(player_sum=14, dealer_card=10, usable_ace=False, done=False, reward=None)
    sent = pickle.loads(pickle.dumps(plain(obs)))
    assert isinstance(sent, PlainObservation) and b"openenv" not in pickle.dumps(sent)
    assert (sent.player_sum, sent.dealer_card, sent.usable_ace, sent.done, sent.reward) == (14, 10, False, False, None)
    task = BlackjackTask()
    assert task.render(sent) == task.render(obs) and task.prompt_key(sent) == task.prompt_key(obs)
    assert task.observe(sent) == task.observe(obs)

    class Cell(BaseModel):
        x: int

    class Board(BaseModel):
        cells: list[Cell]
        best: Cell

    board = plain(Board(cells=[Cell(x=1), Cell(x=2)], best=Cell(x=2)))
    assert board.best.x == 2 and board.model_dump() == {"cells": [{"x": 1}, {"x": 2}], "best": {"x": 2}}
    failed = FailedObservation("boom")
    assert plain(failed) is failed
