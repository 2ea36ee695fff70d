"""OpenEnv classes built on first access: `import openenv.core` takes seconds, and the plain
rules and episodes of each environment must stay cheap to import."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from rlsvc.imports import as_if_missing


@contextmanager
def openenv_without_web_ui() -> Iterator[None]:
    """Import OpenEnv inside this block without its Gradio web UI.

    `openenv.core.env_server` imports its optional web UI whenever gradio is installed (openenv-core
    depends on gradio): about 2.7 s of the 4 s the package takes to import, in every env actor of
    every job, for a UI that rlsvc never serves. While OpenEnv is first imported here gradio reads
    as missing, the case OpenEnv handles itself by leaving the UI out; afterwards gradio imports
    as usual, and OpenEnv's `create_app` still imports its UI when ENABLE_WEB_INTERFACE asks for it.
    """
    with as_if_missing(*(() if "openenv.core.env_server" in sys.modules else ("gradio",))):
        yield


def lazy_classes(module_name: str, names: Iterable[str], build: Callable[[], dict[str, type]]) -> Callable[[str], Any]:
    """A module `__getattr__` that builds the classes once, the first time one of `names` is
    asked for, and registers them under their module-level names, so pickling (Ray) and reprs
    find them."""
    wanted = frozenset(names)

    def __getattr__(name: str) -> Any:
        if name not in wanted:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        with openenv_without_web_ui():
            classes = build()
        for qualname, cls in classes.items():
            cls.__module__ = module_name
            cls.__qualname__ = qualname
        vars(sys.modules[module_name]).update(classes)
        return classes[name]

    return __getattr__
