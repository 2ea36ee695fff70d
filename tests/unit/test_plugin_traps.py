"""The traps a plug-in task's author met (issue 55), each closed: dry-run loads the task, a
factory's own errors are one line naming the setting, the run is named and tagged by the task."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlsvc.config import load_config
from rlsvc.task import TaskError
from rlsvc.tasks.registry import load_task
from rlsvc.train import main, task_for

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "qa_task"
QA = "env.task=rlsvc_qa.task:QATask"


@pytest.fixture
def example_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))


@pytest.fixture
def factories(tmp_path, monkeypatch):
    """A module of task factories that fail the ways a plug-in's own code does."""
    (tmp_path / "trap_factories.py").write_text(
        textwrap.dedent(
            """
            from rlsvc.task import TaskError

            def bad_value(piles=3):
                raise ValueError(f"piles must be between 1 and 5, got {piles}")

            def task_error(piles=3):
                raise TaskError(f"piles: {piles} is too many for this board")

            def buggy(piles=3):
                return len(piles)  # a bug: piles is an int

            def broken_import():
                import no_such_dependency_of_the_task  # noqa: F401
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "trap_factories", raising=False)


def _train(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env_path = f"{REPO}:{EXAMPLE}"
    return subprocess.run(
        [sys.executable, "-m", "rlsvc.train", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
    )


def test_dry_run_loads_and_checks_the_task_before_printing_a_plan():
    for args, expected in (
        (["env.task=nosuchtask"], "env.task: no task named 'nosuchtask'"),
        ([QA, "env.options={colour: red}"], "env.options: rlsvc_qa.task:QATask does not accept ['colour']"),
        ([QA, "model.warm_start_steps=5"], "config error: model.warm_start_steps: task qa has no warm_start_examples hook"),
    ):
        out = _train("--dry-run", *args)
        assert out.returncode == 2 and out.stdout == "", (args, out.stdout, out.stderr)
        assert out.stderr.startswith(f"rlsvc.train: {expected}") and out.stderr.count("\n") == 1, out.stderr
    good = _train("--dry-run", QA)
    assert good.returncode == 0, good.stderr
    assert "rlsvc placement plan (qa)" in good.stdout and "name: qa\n" in good.stdout  # named by the task


@pytest.mark.parametrize(
    "factory, expected",
    [
        ("bad_value", "env.task: trap_factories:bad_value: ValueError: piles must be between 1 and 5, got 3"),
        ("task_error", "env.task: trap_factories:task_error: piles: 3 is too many for this board"),
        ("buggy", "env.task: trap_factories:buggy raised TypeError at trap_factories.py:11: object of type 'int' has no len()"),
        ("broken_import", "env.task: trap_factories:broken_import raised ModuleNotFoundError at trap_factories.py:14: "),
    ],
)
def test_a_factory_that_raises_is_one_line_naming_the_setting(factories, factory, expected):
    with pytest.raises(TaskError) as err:
        load_task(load_config(None, [f"env.task=trap_factories:{factory}"]).env)
    assert str(err.value).startswith(expected) and "\n" not in str(err.value), str(err.value)
    assert "does not accept" not in str(err.value)  # a bug's TypeError is not a signature mismatch


def test_a_factory_error_from_options_names_env_options(factories):
    with pytest.raises(TaskError, match=r"^env.options: trap_factories:bad_value: ValueError: piles must be between 1 and 5, got 9$"):
        load_task(load_config(None, ["env.task=trap_factories:bad_value", "env.options={piles: 9}"]).env)
    with pytest.raises(TaskError, match=r"^env.options: trap_factories:buggy does not accept \['heaps'\]"):
        load_task(load_config(None, ["env.task=trap_factories:buggy", "env.options={heaps: 9}"]).env)


def test_the_cli_reports_a_factory_error_in_one_line_and_exit_2(factories, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "rlsvc.train", "env.task=trap_factories:buggy", f"run.output_dir={tmp_path / 'runs'}"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        env={"PYTHONPATH": f"{REPO}:{tmp_path}", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("rlsvc.train: env.task: trap_factories:buggy raised TypeError at trap_factories.py:11: "), out.stderr
    assert not (tmp_path / "runs").exists()


def test_the_run_is_named_by_the_task_unless_named_in_the_config(example_on_path):
    cfg = load_config(None, [QA])
    assert cfg.run.name == ""
    task_for(cfg)
    assert cfg.run.name == "qa"
    named = load_config(None, [QA, "run.name=nim"])
    task_for(named)
    assert named.run.name == "nim"
    assert load_config(None, []).run.name == "blackjack_tiny"  # the built-in defaults keep their name
    assert load_config(EXAMPLE / "qa_tiny.yaml").run.name == "qa_tiny"


def test_the_env_tag_is_the_tasks_name_not_its_import_path(example_on_path):
    from rlsvc.tracking.run_tags import run_tags

    cfg = load_config(None, [QA])
    task = task_for(cfg)
    assert run_tags(cfg, {"CPU": 2.0}, 1, task.name)["rlsvc.env"] == "qa"


def test_dry_run_in_process_prints_the_plan_of_a_plugin(example_on_path, capsys):
    assert main(["--dry-run", QA]) == 0
    assert "rlsvc placement plan (qa)" in capsys.readouterr().out


def _field_docs(model, prefix=""):
    from pydantic import BaseModel

    for name, field in model.model_fields.items():
        yield f"{prefix}{name}", " ".join((field.description or "").split())
        default = field.default
        if isinstance(default, BaseModel) and not (prefix == "" and name == "env"):  # env: each task's own section
            yield from _field_docs(type(default), f"{prefix}{name}.")


def test_generic_help_is_worded_for_any_task():
    """Settings every task has speak of episodes, answers and seeds; BlackJack appears only as a
    named example (its own section, env.type=blackjack, is BlackJack's)."""
    import re

    from rlsvc.config import Config, EnvBase

    docs = dict(_field_docs(Config)) | dict(_field_docs(EnvBase, "env."))
    blackjack_words = re.compile(r"\b(deals?|HIT|STAND|hands?|~280 states|stand')\b")
    worded_for_blackjack = {k: d for k, d in docs.items() if blackjack_words.search(d) and "BlackJack" not in d}
    assert worded_for_blackjack == {}
    for key in ("rollout.constrained_actions", "eval.val_episodes", "eval.every_steps", "model.warm_start_steps"):
        assert "task" in docs[key], (key, docs[key])


def test_dry_run_reaches_no_remote_environment(capsys):
    """The task is checked, but a remote environment's server only when the job starts: a dry
    run plans on a machine that cannot reach the cluster's network."""
    assert main(["--dry-run", "env.remote.url=http://127.0.0.1:9", "env.remote.connect_timeout_s=1"]) == 0
    assert "rlsvc placement plan (blackjack_tiny)" in capsys.readouterr().out
