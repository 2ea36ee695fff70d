"""Every benchmark result records where it came from (benchmarks/provenance.py): the commit, whether
the tree held uncommitted changes, the host and its CPU flags; the suite's latest.md names each
row's commit. Plain files, git and the standard library: no Ray, no torch."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

from benchmarks.__main__ import markdown
from benchmarks.provenance import commit_note, git_state, provenance, write_result

REPO = Path(__file__).resolve().parents[2]
CPUINFO = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu avx2 avx512f amx_tile\n\nprocessor\t: 1\nflags\t: fpu\n"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True, capture_output=True)


def test_git_state_names_the_commit_and_a_dirty_tree_but_not_fresh_results(tmp_path: Path) -> None:
    assert git_state(tmp_path) == {"commit": None, "dirty": None}  # no checkout: nothing claimed
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "r.json").write_text("{}\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "first")
    state = git_state(tmp_path)
    assert len(state["commit"]) == 40 and state["dirty"] is False
    # a suite's earlier benchmarks rewrite their results before the later ones run
    (tmp_path / "benchmarks" / "results" / "r.json").write_text('{"new": 1}\n')
    (tmp_path / "benchmarks" / "results" / "other.json").write_text("{}\n")
    assert git_state(tmp_path)["dirty"] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_state(tmp_path) == {"commit": state["commit"], "dirty": True}
    _git(tmp_path, "checkout", "-q", "code.py")
    (tmp_path / "new.py").write_text("")  # a new file the run imports counts too
    assert git_state(tmp_path)["dirty"] is True


def test_provenance_records_the_host_and_its_cpu_flags(tmp_path: Path) -> None:
    prov = provenance(tmp_path, cpuinfo=CPUINFO)
    assert prov["cpu_flags"] == ["amx_tile", "avx2", "avx512f", "fpu"]  # the first processor's
    assert "(Intel(R) Xeon(R) Processor, AVX-512 + AMX)" in prov["host"] and prov["commit"] is None
    assert provenance(tmp_path, cpuinfo="")["cpu_flags"] == []


def test_write_result_adds_provenance_and_the_table(tmp_path: Path) -> None:
    path = tmp_path / "out" / "bench.json"
    written = write_result(path, {"ratio": 2.0}, markdown=lambda d: f"ratio {d['ratio']}, {commit_note(d)}")
    saved = json.loads(path.read_text())
    assert saved == written and saved["ratio"] == 2.0
    assert set(saved["provenance"]) == {"commit", "dirty", "host", "cpu_flags", "written"}
    assert path.with_suffix(".md").read_text().startswith("ratio 2.0, commit ")


def test_commit_note_says_when_a_result_predates_provenance() -> None:
    assert commit_note({"ratio": 1.0}) == commit_note(None) == "commit not recorded"
    assert commit_note({"provenance": {"commit": "abcdef0123", "dirty": False}}) == "commit abcdef0"
    assert commit_note({"provenance": {"commit": "abcdef0123", "dirty": True}}) == "commit abcdef0 with uncommitted changes"
    # the step speed-up benchmark recorded the checkout it measured before provenance existed
    assert commit_note({"head": "0123456789" + "+changes"}) == "commit 0123456 with uncommitted changes"
    assert commit_note({"head": "0123456789"}) == "commit 0123456"


def test_every_benchmark_module_writes_its_results_through_write_result() -> None:
    """A module that writes under the results folder does it with `write_result` and never with
    `json.dumps` into a file of its own."""
    offenders = []
    for path in sorted((REPO / "benchmarks").glob("*.py")):
        if path.name in {"provenance.py", "__main__.py", "__init__.py"}:
            continue
        text = path.read_text()
        if "RESULTS_DIR" not in text:
            continue
        calls = {
            node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Call)
        }
        if "write_result" not in calls or "dumps" in calls:
            offenders.append(path.name)
    assert not offenders, f"benchmarks that write results without provenance: {offenders}"


def test_latest_md_names_each_rows_commit() -> None:
    from test_benchmarks import SAMPLE

    new = {**SAMPLE["floor"], "provenance": {"commit": "1234567abc", "dirty": False, "host": "elsewhere"}}
    results = {
        "floor": {"command": "python -m benchmarks.compute_floor", "seconds": 9.0, "status": "ok", "data": new},
        "trl": {"command": "python -m benchmarks.vs_trl", "seconds": 9.0, "status": "ok", "data": SAMPLE["trl"]},
        "async": {
            "command": "x",
            "seconds": 1.0,
            "status": "failed (exit 1)",
            "log": "l",
            "provenance": {"commit": "feedbee0", "dirty": True},
        },
    }
    text = markdown(results, quick=False, started="2026-01-01 00:00 UTC", total_s=60.0, on="here")
    assert "| target | measured: median (min-max) | met | not like for like, or less than it seems | commit |" in text
    assert "| orchestration overhead vs the compute floor (reported) | 36% (30%-40%) | - | the floor ran first in every pair" in text
    assert "before 2026-12-07) | commit 1234567 |" in text
    assert "| commit not recorded |" in text  # the TRL sample predates provenance
    assert "synchronous episodes/s" in text and "| not measured | - | - | commit feedbee with uncommitted changes |" in text
    assert "(9 s on elsewhere, commit 1234567)" in text  # a benchmark run on another host says so
    assert "rollout useful tokens/s >= 3x eager HF generate (representative" in text and "| not measured | - | - | not measured |" in text
    assert "LoRA bytes per sync >= 20x fewer than full (28M Qwen3, rank 16 on q/k/v/o) | not measured |" in text
    assert "endpoint's overhead <= 10% of step time (same episodes, direct engine calls) | not measured |" in text
