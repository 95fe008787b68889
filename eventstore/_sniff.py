"""Telling a trace file from anything else (SPEC §4.5), by its first lines.

Owns: ``not_a_trace`` — why a file is not a trace, or ``None`` when it looks like one.  Does not:
read the whole file (``_reader``, ``tail``) or judge its records (the validator).
"""

from __future__ import annotations

import codecs
import os
from typing import Final

from ._codec import decode

__all__ = ["not_a_trace"]

_SNIFF_BYTES: Final = 64 * 1024
_SNIFF_LINES: Final = 64
_BOM: Final = b"\xef\xbb\xbf"


def not_a_trace(path: str | os.PathLike[str]) -> str | None:
    """``None`` when ``path`` looks like a trace file, else why not (a short phrase).

    A trace is UTF-8 text without NUL bytes in which one of the first complete non-blank lines
    decodes as an OmniMessage record.  An empty file is a (crash-residue) trace; a file whose
    first line is longer than the sniffed prefix passes when it starts like a JSON object.
    Reads at most 64 KiB.  ``OSError`` (missing, a directory, no permission) propagates."""
    with open(path, "rb") as f:
        head = f.read(_SNIFF_BYTES)
        more = bool(f.read(1))
    if not head:
        return None
    if b"\x00" in head:
        return "binary file, not a trace"
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=not more)
    except UnicodeDecodeError:
        return "not UTF-8 text, not a trace"
    if head.startswith(_BOM):
        head = head[len(_BOM) :]
    *lines, tail = head.split(b"\n")  # ``tail``: unterminated (torn, or cut by the limit)
    complete = [line for line in lines if line.strip()][:_SNIFF_LINES]
    for line in complete:
        try:
            decode(line.strip())
        except Exception:
            continue
        return None
    if not complete and tail.lstrip().startswith(b"{"):
        return None  # a torn first record, or one longer than the sniffed prefix
    return "not a trace (no line is an OmniMessage record)"
