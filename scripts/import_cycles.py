"""Find import circles among the modules of rlsvc/, by reading the source (nothing is imported).

What counts as an edge A -> B (A, B modules of rlsvc/):
- `import B` and `from B import x` anywhere in A that runs: at module level, and (unless
  `--module-level`) inside functions and classes too, since a deferred import still ties A to B
  (a base file whose factory imports its implementations is a circle even when the import waits);
- `from P import x` counts as A -> P.x where `P.x` is a module of rlsvc/, else as A -> P;
- relative imports are resolved against A's package.
What does not count:
- imports under `if TYPE_CHECKING:` (they never run);
- the implicit import of a module's parent packages (`import a.b.c` runs `a/__init__.py` and
  `a/b/__init__.py`): counting it would make every package whose `__init__` imports its own
  implementations a circle with each of them, which Python resolves by design;
- imports of modules outside rlsvc/.
A circle is a strongly connected component of two or more modules (or a module importing itself).

    python scripts/import_cycles.py                 # list the circles; exit 1 if there is one
    python scripts/import_cycles.py --module-level  # module-level imports only

Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _Imports(ast.NodeVisitor):
    """Collects the import statements that run: `if TYPE_CHECKING:` bodies skipped (their `else`
    runs), function and class bodies skipped with `module_level`."""

    def __init__(self, module_level: bool) -> None:
        self.module_level = module_level
        self.found: list[ast.Import | ast.ImportFrom] = []

    def visit_Import(self, node: ast.Import) -> None:
        self.found.append(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.found.append(node)

    def visit_If(self, node: ast.If) -> None:
        for child in node.orelse if _is_type_checking(node.test) else [*node.body, *node.orelse]:
            self.visit(child)

    def _scope(self, node: ast.AST) -> None:
        if not self.module_level:
            self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scope


def _targets(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool, modules: set[str]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        package = importer.split(".") if is_package else importer.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([base] if base else [])])
    for alias in node.names:
        # `from P import m` of a submodule m runs P only as m's parent (not counted, see above)
        yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base


def import_graph(root: Path, module_level: bool = False) -> dict[str, set[str]]:
    """Module -> the rlsvc/ modules it imports (see the module docstring for what counts)."""
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    modules = set(files)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        finder = _Imports(module_level)
        finder.visit(tree)
        for node in finder.found:
            for target in _targets(node, name, path.name == "__init__.py", modules):
                if target in modules and target != name:
                    graph[name].add(target)
                elif target == name:
                    graph[name].add(name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with a circle in them (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module-level", action="store_true", help="count module-level imports only")
    parser.add_argument("--root", type=Path, default=REPO / "rlsvc", help="the package to check")
    args = parser.parse_args(argv)
    found = cycles(import_graph(args.root, args.module_level))
    for component in found:
        print(" <-> ".join(component))
    print(f"{len(found)} import circle(s) in {args.root.name}/")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
