"""Where a benchmark result came from, written into the result itself: the commit of the code that
ran, whether the tree held uncommitted changes, the host and its CPU flags. PyTorch's and vLLM's
CPU kernels pick their code by those flags, and hosts of the same size differ in them, so a ratio
moves with the host as well as with the code (docs/benchmarks.md, "Method").

Every benchmark writes its results through `write_result`, which adds `provenance`; the suite's
`latest.md` names each row's commit from it (`commit_note`).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cpu_kind(cpuinfo: str) -> str:
    """The processor's model name and the widest vector and matrix instructions it has, from
    /proc/cpuinfo's text."""
    fields = cpuinfo_fields(cpuinfo)
    flags = set(fields.get("flags", "").split())
    isa = [name for name, flag in (("AVX-512", "avx512f"), ("AVX2", "avx2")) if flag in flags][:1]
    isa += ["AMX"] if "amx_tile" in flags else []
    return ", ".join(filter(None, [fields.get("model name"), " + ".join(isa)]))


def cpuinfo_fields(cpuinfo: str) -> dict[str, str]:
    """The first processor's `key: value` lines of /proc/cpuinfo's text."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    return fields


def read_cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux
        return ""


def machine(cpuinfo: str | None = None) -> str:
    """One line: CPUs, processor and widest instructions, memory, architecture, Python."""
    import psutil

    cpu = cpu_kind(read_cpuinfo() if cpuinfo is None else cpuinfo)
    return (
        f"{os.cpu_count()} CPUs{f' ({cpu})' if cpu else ''}, {psutil.virtual_memory().total / 2**30:.0f} GiB, "
        f"{platform.machine()}, Python {platform.python_version()}"
    )


def git_state(root: Path = ROOT) -> dict[str, str | bool | None]:
    """The checked-out commit and whether tracked or new (not ignored) files differ from it,
    results files aside (None, None outside a git checkout: an unpacked archive)."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    # the results folder is left out: a suite's earlier benchmarks write there before its later ones run
    status = git("status", "--porcelain", "--", ".", ":(exclude)benchmarks/results") if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def provenance(root: Path = ROOT, cpuinfo: str | None = None) -> dict:
    """The commit, the tree's state, the host and its CPU flags, and when: what `write_result` adds."""
    info = read_cpuinfo() if cpuinfo is None else cpuinfo
    return {
        **git_state(root),
        "host": machine(info),
        "cpu_flags": sorted(set(cpuinfo_fields(info).get("flags", "").split())),
        "written": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def write_result(path: Path, data: dict, markdown: Callable[[dict], str] | None = None) -> dict:
    """Write `data` with its `provenance` as JSON to `path`, and `markdown(data)` beside it as
    `.md` when given (the docs include those tables). Returns what was written."""
    data = {**data, "provenance": provenance()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    if markdown is not None:
        path.with_suffix(".md").write_text(markdown(data) + "\n")
    return data


def commit_note(data: dict | None) -> str:
    """`commit abc1234`, `commit abc1234 with uncommitted changes`, or, for a result written
    before results recorded it, `commit not recorded`."""
    prov = (data or {}).get("provenance") or {}
    if not prov.get("commit") and (data or {}).get("head"):  # step_speedup's own record, from before provenance
        commit, _, changes = data["head"].partition("+")  # type: ignore[index]
        prov = {"commit": commit, "dirty": bool(changes)}
    if not prov.get("commit"):
        return "commit not recorded"
    return f"commit {prov['commit'][:7]}" + (" with uncommitted changes" if prov.get("dirty") else "")
