"""Finding the task a config names: a built-in by `env.type`, a third-party one by entry point
(group `rlsvc.tasks`) or by import path (`env.task=package.module:factory`).

A third-party factory is called with `env.options` as keyword arguments and must return a
`rlsvc.task.Task`. Every failure is a `TaskError` of one line that names the setting.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from rlsvc.task import Task, TaskError

ENTRY_POINT_GROUP = "rlsvc.tasks"
BUILTIN: dict[str, str] = {
    "blackjack": "rlsvc.tasks.blackjack:BlackjackTask",
    "code": "rlsvc.tasks.code:CodeTask",
}
"""Built-in tasks by `env.type`; each class builds itself from its config section (`from_config`)."""


def load_task(env: Any) -> Task:
    """The task of the config's `env` section, built."""
    if env.type in BUILTIN:
        return _import(BUILTIN[env.type], "env.type").from_config(env)
    factory = resolve(env.task)
    try:
        task = factory(**env.options)
    except TypeError as e:  # the factory's signature does not take these options
        raise TaskError(f"env.options: {env.task} does not accept {sorted(env.options)}: {e}") from e
    if not isinstance(task, Task):
        raise TaskError(f"env.task: {env.task} returned {type(task).__name__}, not an rlsvc.task.Task")
    return task


def resolve(spec: str) -> Callable[..., Any]:
    """`package.module:factory` (import path) or an entry-point name of group rlsvc.tasks."""
    if ":" in spec:
        return _import(spec, "env.task")
    found = entry_points(group=ENTRY_POINT_GROUP)
    for ep in found:
        if ep.name == spec:
            try:
                return ep.load()  # type: ignore[no-any-return]
            except (ImportError, AttributeError) as e:
                raise TaskError(f"env.task: entry point {spec} ({ep.value}) does not load: {e}") from e
    names = ", ".join(sorted(ep.name for ep in found)) or "none installed"
    raise TaskError(
        f"env.task: no task named '{spec}' (entry points in group {ENTRY_POINT_GROUP}: {names}; "
        f"or give an import path package.module:factory)"
    )


def _import(path: str, setting: str) -> Any:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise TaskError(f"{setting}: '{path}' is not of the form package.module:factory")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise TaskError(f"{setting}: cannot import {module_name}: {e}") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TaskError(f"{setting}: {module_name} has no attribute {attr}") from None
    if not callable(obj):
        raise TaskError(f"{setting}: {path} is not callable")
    return obj
