"""Diagnostics: what a reader or writer noticed about a file without failing.

Owns: the ``Diagnostic`` record.  Does not: print anything (callers decide, R-READ-3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TypeAlias

import msgspec

__all__ = ["Diagnostic", "DiagnosticKind"]

DiagnosticKind: TypeAlias = Literal["torn_tail", "malformed", "empty_file", "torn_tail_repaired"]


class Diagnostic(msgspec.Struct, frozen=True):
    """``line`` is 1-based; ``kind`` says what happened; ``detail`` says why, for people."""

    path: Path
    line: int
    kind: DiagnosticKind
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.kind}: {self.detail}"
