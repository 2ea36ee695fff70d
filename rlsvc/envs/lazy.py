"""OpenEnv classes built on first access: `import openenv.core` loads gradio and takes seconds,
and the plain rules and episodes of each environment must stay cheap to import."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any


def lazy_classes(module_name: str, names: Iterable[str], build: Callable[[], dict[str, type]]) -> Callable[[str], Any]:
    """A module `__getattr__` that builds the classes once, the first time one of `names` is
    asked for, and registers them under their module-level names, so pickling (Ray) and reprs
    find them."""
    wanted = frozenset(names)

    def __getattr__(name: str) -> Any:
        if name not in wanted:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        classes = build()
        for qualname, cls in classes.items():
            cls.__module__ = module_name
            cls.__qualname__ = qualname
        vars(sys.modules[module_name]).update(classes)
        return classes[name]

    return __getattr__
