"""`rlsvc tasks` lists the installed tasks (built-in and entry points) with their options; the
code environment's scorer stays reachable as `rlsvc tasks score` and `rlsvc tasks problems`."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsvc.cli import main as rlsvc
from rlsvc.tasks.__main__ import main

pytestmark = pytest.mark.unit
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "qa_task"


def installed_entry_points(tmp_path: Path, lines: str) -> Path:
    """What `pip install` of a task package leaves for importlib.metadata."""
    info = tmp_path / "some_tasks-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: some-tasks\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[rlsvc.tasks]\n{lines}\n")
    return tmp_path


def test_the_tasks_command_lists_built_ins_and_entry_points_with_their_options(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(installed_entry_points(tmp_path, "qa = rlsvc_qa.task:QATask\nbroken = no_such_pkg.mod:Task")))
    assert rlsvc(["tasks"]) == 0
    out = capsys.readouterr().out
    blocks = {b.split()[0]: b for b in out.strip().split("\n\n")}
    assert list(blocks) == ["blackjack", "code", "reasoning", "endpoint", "broken", "qa"]
    assert "    env.endpoint.* (python -m rlsvc.train --help)" in blocks["endpoint"]
    assert blocks["blackjack"].startswith("blackjack  (built-in: rlsvc.tasks.blackjack:BlackjackTask; select with env.type=blackjack)")
    assert "    env.then_stick_at (default None)" in blocks["blackjack"] and "env.code.*" in blocks["code"]
    assert "    env.data.*" in blocks["reasoning"] and "    env.reward (default 'strict')" in blocks["reasoning"]
    assert blocks["qa"].startswith("qa  (entry point: rlsvc_qa.task:QATask; select with env.task=qa)")
    assert "    env.options.answers (default None)\n    env.options.validate_split (default 'val')" in blocks["qa"]
    assert (
        "(does not load: env.task: entry point broken (no_such_pkg.mod:Task) does not load: No module named 'no_such_pkg')"
        in blocks["broken"]
    )  # listed, not fatal
    assert main(["list"]) == 0 and capsys.readouterr().out == out


def test_the_scorer_is_reached_through_the_tasks_command(capsys):
    assert main(["problems"]) == 0
    ids = capsys.readouterr().out.split()
    assert "add_two" in ids and len(ids) > 50
    assert main(["score", "--problem", "no_such_problem"]) == 2
    assert "no programming problem 'no_such_problem'" in capsys.readouterr().err


def test_an_unknown_tasks_command_is_one_line_and_exit_2(capsys):
    assert main(["lsit"]) == 2
    assert capsys.readouterr().err == "rlsvc.tasks: unknown command 'lsit' (commands: list, score, problems)\n"
