"""Text from a run made valid UTF-8 where it leaves the sandbox.

A Python `str` may hold lone surrogates (`'\\ud800'`): a run's exception message can, and JSON
from a remote interpreter can decode to one. No UTF-8 encoder accepts them, so one such
character in an observation made OpenEnv's server fail to send the whole message. Each one is
replaced with U+FFFD (the replacement character), and the count of replacements is kept, so the
change is visible in the result."""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_utf8(text: str) -> tuple[str, int]:
    """`text` with every surrogate code point replaced by U+FFFD, and how many were replaced."""
    return _SURROGATE.subn("\ufffd", text)
