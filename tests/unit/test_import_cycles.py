"""No import circles in rlsvc/ (scripts/import_cycles.py), and the checker finds the circles it
should and only those."""

from __future__ import annotations

from pathlib import Path

from conftest import load_script

REPO = Path(__file__).resolve().parents[2]
import_cycles = load_script("import_cycles")


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / "pkg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_rlsvc_has_no_import_circles():
    found = import_cycles.cycles(import_cycles.import_graph(REPO / "rlsvc"))
    assert found == [], "import circles in rlsvc/: " + "; ".join(" <-> ".join(c) for c in found)


def test_a_deferred_import_closes_a_circle_unless_only_module_level_counts(tmp_path):
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "base.py": "def build():\n    from pkg.impl import Impl\n    return Impl()\n",
            "impl.py": "from pkg.base import build\n",
        },
    )
    assert import_cycles.cycles(import_cycles.import_graph(root)) == [["pkg.base", "pkg.impl"]]
    assert import_cycles.cycles(import_cycles.import_graph(root, module_level=True)) == []


def test_type_checking_imports_and_parent_packages_do_not_count(tmp_path):
    root = _tree(
        tmp_path,
        {
            "__init__.py": "from pkg.a import A\n",  # a package's __init__ importing its own module
            "a.py": "from typing import TYPE_CHECKING\nfrom pkg import b\nif TYPE_CHECKING:\n    from pkg.c import C\nclass A: ...\n",
            "b.py": "",
            "c.py": "from . import a\n",
        },
    )
    graph = import_cycles.import_graph(root)
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.c"] == {"pkg.a"}
    assert import_cycles.cycles(graph) == []


def test_relative_imports_resolve_and_close_a_circle(tmp_path):
    root = _tree(tmp_path, {"__init__.py": "", "sub/__init__.py": "", "sub/x.py": "from ..y import f\n", "y.py": "from .sub import x\n"})
    assert import_cycles.cycles(import_cycles.import_graph(root)) == [["pkg.sub.x", "pkg.y"]]
