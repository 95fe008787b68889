"""PLACEHOLDER — being written (reader)."""
from __future__ import annotations
class TraceRead:
    pass
def read_trace(*a: object) -> None: raise NotImplementedError
def iter_trace(*a: object) -> None: raise NotImplementedError
