"""PLACEHOLDER — being written (TraceWriter)."""
from __future__ import annotations
from typing import Literal, TypeAlias
FsyncPolicy: TypeAlias = Literal["never", "rotate", "turn", "always"]
class TraceWriter:  # replaced by the writer implementation
    pass
