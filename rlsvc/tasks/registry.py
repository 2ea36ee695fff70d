"""Finding the task a config names: a built-in by `env.type`, a third-party one by entry point
(group `rlsvc.tasks`) or by import path (`env.task=package.module:factory`).

A third-party factory is called with `env.options` as keyword arguments and must return a
`rlsvc.task.Task`. Every failure is a `TaskError` of one line that names the setting: options the
factory's signature does not take (`env.options`), and any exception the factory or the task's
own checks raise while it is built, a `TaskError` with its own message, anything else (a bug)
with its type, where it was raised, and its message.
"""

from __future__ import annotations

import importlib
import inspect
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from rlsvc.task import Task, TaskError

ENTRY_POINT_GROUP = "rlsvc.tasks"
BUILTIN: dict[str, str] = {
    "blackjack": "rlsvc.tasks.blackjack:BlackjackTask",
    "code": "rlsvc.tasks.code:CodeTask",
    "reasoning": "rlsvc.tasks.reasoning:ReasoningTask",
    "endpoint": "rlsvc.serve.task:EndpointTask",
}
"""Built-in tasks by `env.type`; each class builds itself from its config section (`from_config`)."""


def load_task(env: Any) -> Task:
    """The task of the config's `env` section, built."""
    if env.type in BUILTIN:
        builder = _import(BUILTIN[env.type], "env.type").from_config
        return task_call(lambda: builder(env), "env", env.type)
    factory = resolve(env.task)
    options = dict(env.options)
    try:
        inspect.signature(factory).bind(**options)
    except TypeError as e:  # the factory's signature does not take these options
        raise TaskError(f"env.options: {env.task} does not accept {sorted(options)}: {e}") from e
    except ValueError:  # no signature to read (some built-ins): calling it tells
        pass
    task = task_call(lambda: factory(**options), "env.options" if options else "env.task", env.task)
    if not isinstance(task, Task):
        raise TaskError(f"env.task: {env.task} returned {type(task).__name__}, not an rlsvc.task.Task")
    return task


def task_call(make: Callable[[], Any], setting: str, name: str) -> Any:
    """`make()` (a task's own code), its exceptions as one `TaskError` line naming `setting`: a `TaskError` (or
    `ValueError`, the usual answer to a bad option) by its message, anything else as the bug it
    is: its type and the line of the task's code that raised it."""
    try:
        return make()
    except TaskError as e:
        raise TaskError(f"{setting}: {name}: {_one_line(e)}") from e
    except ValueError as e:
        raise TaskError(f"{setting}: {name}: ValueError: {_one_line(e)}") from e
    except Exception as e:
        raise TaskError(f"{setting}: {name} raised {type(e).__name__}{_where(e)}: {_one_line(e)}") from e


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:300] or type(e).__name__


def _where(e: BaseException) -> str:
    """' at file.py:LINE' of the innermost frame, so a bug reads as one."""
    frames = traceback.extract_tb(e.__traceback__)
    return f" at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else ""


def resolve(spec: str) -> Callable[..., Any]:
    """`package.module:factory` (import path) or an entry-point name of group rlsvc.tasks."""
    if ":" in spec:
        return _import(spec, "env.task")
    found = entry_points(group=ENTRY_POINT_GROUP)
    for ep in found:
        if ep.name == spec:
            try:
                loaded: Callable[..., Any] = task_call(ep.load, "env.task", f"entry point {spec} ({ep.value})")
            except TaskError as e:
                if isinstance(e.__cause__, (ImportError, AttributeError)):  # not installed as declared
                    raise TaskError(f"env.task: entry point {spec} ({ep.value}) does not load: {_one_line(e.__cause__)}") from e
                raise
            return loaded
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
    except Exception as e:  # the module itself raised while it was imported
        raise TaskError(f"{setting}: importing {module_name} raised {type(e).__name__}{_where(e)}: {_one_line(e)}") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TaskError(f"{setting}: {module_name} has no attribute {attr}") from None
    if not callable(obj):
        raise TaskError(f"{setting}: {path} is not callable")
    return obj


@dataclass(frozen=True)
class InstalledTask:
    """A task `env.task` (or `env.type`) can select, as `rlsvc tasks` lists it."""

    name: str
    """What selects it: `env.type=NAME` for a built-in, `env.task=NAME` for an entry point."""
    source: str
    """`built-in` or `entry point`."""
    target: str
    """The factory's import path."""


def installed() -> Iterator[InstalledTask]:
    """The built-in tasks, then the entry points of group rlsvc.tasks, by name."""
    for name, target in BUILTIN.items():
        yield InstalledTask(name, "built-in", target)
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name):
        yield InstalledTask(ep.name, "entry point", ep.value)
