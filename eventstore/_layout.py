"""PLACEHOLDER — being written (DataRoot)."""
from __future__ import annotations
class DataRoot:
    pass
class SessionInfo:
    pass
def validate_id(value: str) -> str: raise NotImplementedError
