"""The `rlsvc` console script: each command runs the same program as its `python -m` form, with
its options; an unknown command is one line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlsvc.cli import COMMANDS, main

SCRIPT = Path(sys.executable).parent / "rlsvc"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_the_console_script_is_installed_and_lists_its_commands():
    assert SCRIPT.is_file(), "pip install -e . puts the rlsvc script beside the interpreter"
    out = run("--help")
    assert out.returncode == 0 and all(f"  {name}" in out.stdout for name in COMMANDS)


def test_commands_run_their_programs_with_the_same_options():
    train = run("train", "--help")
    assert train.returncode == 0 and "env.remote.url" in train.stdout  # the config reference of python -m rlsvc.train
    refused = run("eval", "--checkpoint", "x", "--episodes", "0")
    assert refused.returncode == 2 and refused.stderr.strip() == "rlsvc.eval: --episodes must be >= 1"
    chaos = run("chaos", "--address", "127.0.0.1:1", "--every", "0")
    assert chaos.returncode == 2 and chaos.stderr.strip() == "rlsvc.chaos: --every and --duration must be > 0"


def test_an_unknown_command_is_one_line_and_exit_2(capsys):
    assert main(["trian"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlsvc: unknown command 'trian' (commands: train, eval,") and err.count("\n") == 1
    assert main([]) == 2


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_names_a_module_with_main(name):
    import importlib

    assert callable(importlib.import_module(COMMANDS[name][0]).main)
