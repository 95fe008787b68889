"""Library reports on the terminal.

Owns: routing what ``eventstore``, ``engine`` and ``replay`` log (their SPEC stderr texts:
skipped malformed lines, a raising approve callback, an environment that threw) to the current
``sys.stderr``, message only.  Does not: decide what is logged (the libraries do) or format it.
"""

from __future__ import annotations

import logging
import sys
from typing import IO, Any

__all__ = ["route_library_logs"]

LIBRARY_LOGGERS = ("eventstore", "engine", "replay")


class _CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of the record (a test runner swaps it)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))

    @property
    def stream(self) -> IO[str]:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass  # the base class assigns one in __init__; ours is always the current stderr


def route_library_logs() -> None:
    """Install the stderr handler on the library loggers, once."""
    for name in LIBRARY_LOGGERS:
        log = logging.getLogger(name)
        if not any(isinstance(h, _CurrentStderr) for h in log.handlers):
            log.addHandler(_CurrentStderr())
        if log.level == logging.NOTSET:
            log.setLevel(logging.WARNING)
