"""Trace file names (SPEC R-ROOT-4): ``<session_id>_<NNN>.jsonl``, NNN zero-padded to 3+ digits.

Owns: the one spelling of the pattern, both ways.  Does not: validate ids (``_layout``) or
touch the file system.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final

__all__ = ["TRACE_NAME", "parse_trace_name", "trace_file_name"]

#: The one spelling of the pattern (``parse_trace_name``; a listing matches it without a call).
TRACE_NAME: Final = re.compile(r"^(.+)_(\d{3,})\.jsonl\Z")


def trace_file_name(session_id: str, index: int) -> str:
    """The name of file ``index`` (1-based) of ``session_id``."""
    return f"{session_id}_{index:03d}.jsonl"


def parse_trace_name(path: str | os.PathLike[str]) -> tuple[str, int] | None:
    """``(session_id, index)`` of a trace file name (or path), ``None`` when it is none."""
    # A bare name (what directory listings hand over) needs no Path: listings call this per file.
    name = path if isinstance(path, str) and "/" not in path else Path(path).name
    m = TRACE_NAME.match(name)
    return (m.group(1), int(m.group(2))) if m else None
