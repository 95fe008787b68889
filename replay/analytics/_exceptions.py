"""Errors of ``replay.analytics``.

Owns: the package's exception root and its two cases.  Does not: decide exit codes (the CLI).
"""

from __future__ import annotations

from typing import Final

__all__ = ["INSTALL_HINT", "AnalyticsError", "AnalyticsUnavailable"]

#: What to run when DuckDB is missing (the optional ``analytics`` extra).
INSTALL_HINT: Final = "pip install 'penguin-engine[analytics]'"


class AnalyticsError(Exception):
    """The root of this package's errors: a bad query, an unknown report, no trace files."""


class AnalyticsUnavailable(AnalyticsError, ImportError):
    """DuckDB is not installed; the message says how to install it."""

    def __init__(self) -> None:
        super().__init__(f"fleet analytics need DuckDB: {INSTALL_HINT}")
