"""Importing heavy libraries without optional parts rlsvc never uses.

Start-up is mostly imports, and on a two-core machine every actor's imports share the cores with
every other actor's: a package a library imports only because it happens to be installed costs
CPU time on the job's critical path.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def as_if_missing(*packages: str) -> Iterator[None]:
    """Inside this block each of `packages` not imported yet reads as not installed: `import p`
    raises ModuleNotFoundError and `importlib.util.find_spec(p)` is None, the case a library
    handles by leaving out what needs it. Afterwards they import as usual; a library that cached
    their absence during the block keeps that answer."""
    hidden = [p for p in packages if p not in sys.modules]
    for p in hidden:
        sys.modules[p] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for p in hidden:
            if p in sys.modules and sys.modules[p] is None:
                del sys.modules[p]
