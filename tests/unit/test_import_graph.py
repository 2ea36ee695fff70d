"""The task layer has no import circle: `EnvSpec` lives beside `Task` (not in the pool that serves
it), and BlackJack's evaluation sits below both the task and `rlsvc.eval` (issue 55). Every import
counts, at the top, inside functions and under TYPE_CHECKING, since each is a dependency a reader
(and a type checker) follows."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

pytestmark = pytest.mark.unit
RLSVC = Path(__file__).resolve().parents[2] / "rlsvc"
TASK_LAYER = (
    "rlsvc.task",
    "rlsvc.single_turn",
    "rlsvc.saved_policy",
    "rlsvc.policy_io",
    "rlsvc.eval",
    "rlsvc.tasks.blackjack",
    "rlsvc.tasks.blackjack_eval",
    "rlsvc.envs.openenv_pool",
    "rlsvc.envs.blackjack",
    "rlsvc.envs.plain",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(RLSVC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> nx.DiGraph:
    modules = {module_name(p): p for p in RLSVC.rglob("*.py")}
    graph = nx.DiGraph()
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            graph.add_edges_from((name, t) for t in targets if t in modules and t != name)
    return graph


def test_the_task_layer_is_in_no_import_circle():
    graph = import_graph()
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1 and set(c) & set(TASK_LAYER)]
    assert not circles, circles


def test_the_graph_sees_imports_inside_functions_and_type_checking_blocks():
    graph = import_graph()
    assert graph.has_edge("rlsvc.task", "rlsvc.rewards.rubric")  # inside Task.rubric
    assert graph.has_edge("rlsvc.task", "rlsvc.buffer.replay")  # under TYPE_CHECKING
