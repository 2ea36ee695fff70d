"""No prompt a task renders becomes `<unk>`: a plug-in task gets the byte tokenizer unless the
config chooses one, and a job refuses to start (one line, exit 2) when a sampled prompt of its
task holds `<unk>` for the tokenizer it has; an over-long prompt is a warning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlsvc.config import load_config
from rlsvc.models.tokenizer import BOS_ID, UNK_ID, build_core, build_tokenizer
from rlsvc.task import TaskError
from rlsvc.train import check_task_prompts, task_for

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]

NIM = """
from typing import Any

from rlsvc.envs.openenv_api import Action, Environment, Observation, State
from rlsvc.envs.openenv_pool import EnvSpec
from rlsvc.task import Task


class NimAction(Action):
    take: int


class NimObservation(Observation):
    stones: int


class NimEnvironment(Environment):
    def __init__(self):
        super().__init__()
        self._state = State()

    def reset(self, seed=None, episode_id=None, **kwargs: Any):
        return NimObservation(stones=9 + (seed or 0) % 4, done=False, reward=None)

    def step(self, action, timeout_s=None, **kwargs: Any):
        return NimObservation(stones=0, done=True, reward=1.0)

    @property
    def state(self):
        return self._state


class Nim(Task):
    name = "nim"

    def __init__(self, wordy: bool = False):
        self.wordy = wordy

    def env_spec(self):
        return EnvSpec("nim", NimEnvironment, NimAction, NimObservation, State, lambda a: {"take": a})

    def render(self, observation):
        if self.wordy:
            return f"There are {observation.stones} stones left on the table. How many do you take: 1, 2 or 3? "
        return f"There are {observation.stones} stones. Take 1, 2 or 3."

    def parse(self, text):
        return int(text) if text.strip() in ("1", "2", "3") else None
"""


@pytest.fixture
def nim_on_path(tmp_path, monkeypatch):
    (tmp_path / "nim_task.py").write_text(NIM)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "nim_task", raising=False)
    return tmp_path


def test_the_byte_tokenizer_reads_any_text_exactly():
    tok = build_tokenizer("bytes")
    for text in ("There are 11 stones. Take 1, 2 or 3.", "héllo ✓\n\tdone", "HIT"):
        ids = tok.encode(text, add_special_tokens=False)
        assert UNK_ID not in ids and tok.decode(ids) == text
    assert len(tok) == 260 and tok.encode("A", add_special_tokens=False) == [4 + ord("A")]
    assert build_tokenizer("blackjack").encode("stones 11.", add_special_tokens=False) == [UNK_ID, UNK_ID]  # the trap
    assert build_core("bytes").token_to_id("<bos>") == BOS_ID


def test_a_plugin_task_gets_the_byte_tokenizer_unless_the_config_chooses(nim_on_path, capsys):
    cfg = load_config(None, ["env.task=nim_task:Nim", "model.titan.max_seq_len=64"])
    assert (cfg.model.titan.tokenizer, cfg.model.titan.vocab_size) == ("bytes", 320)
    check_task_prompts(cfg, task_for(cfg))  # every sampled prompt is read, none is cut
    assert capsys.readouterr().err == ""
    assert load_config(None, []).model.titan.tokenizer == "blackjack"  # BlackJack's own vocabulary is unchanged
    assert (
        load_config(None, ["env.task=nim_task:Nim", "model.titan.tokenizer=chars", "model.titan.vocab_size=128"]).model.titan.vocab_size
        == 128
    )


def test_a_prompt_the_tokenizer_reads_as_unk_refuses_the_job(nim_on_path):
    cfg = load_config(None, ["env.task=nim_task:Nim", "model.titan.tokenizer=blackjack", "model.titan.vocab_size=64"])
    with pytest.raises(TaskError) as err:
        check_task_prompts(cfg, task_for(cfg))
    assert str(err.value).startswith(
        "model.titan.tokenizer: the blackjack tokenizer reads 'There', 'are', 'stones.', 'Take', '1,', 'or', '3.' in task nim's prompts as <unk>; "
        "set model.titan.tokenizer=bytes"
    ), str(err.value)


def test_a_prompt_longer_than_the_model_takes_is_a_warning(nim_on_path, capsys):
    cfg = load_config(None, ["env.task=nim_task:Nim", "env.options={wordy: true}"])
    check_task_prompts(cfg, task_for(cfg))
    assert capsys.readouterr().err == (
        "rlsvc.train: warning: model.titan.max_seq_len: task nim's prompts take up to 72 tokens and 30 fit before the answer; "
        "longer prompts keep only their end\n"
    )


def test_the_built_in_tasks_and_the_example_pass_the_check(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(REPO / "examples" / "qa_task"))
    for cfg in (load_config(None, []), load_config(REPO / "examples" / "qa_task" / "qa_tiny.yaml")):
        check_task_prompts(cfg, task_for(cfg))
    assert capsys.readouterr().err == ""


def test_the_cli_refuses_unk_prompts_in_dry_run_and_in_a_job(nim_on_path, tmp_path):
    for extra in (["--dry-run"], [f"run.output_dir={tmp_path / 'runs'}"]):
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "rlsvc.train",
                *extra,
                "env.task=nim_task:Nim",
                "model.titan.tokenizer=blackjack",
                "model.titan.vocab_size=64",
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=300,
            env={"PYTHONPATH": f"{REPO}:{nim_on_path}", "PATH": "/usr/bin:/bin"},
        )
        assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1, out.stderr
        assert out.stderr.startswith("rlsvc.train: model.titan.tokenizer: the blackjack tokenizer reads 'There'"), out.stderr
    assert not (tmp_path / "runs").exists()
