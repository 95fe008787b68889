"""Positioned, incremental reads of one trace file (SPEC §4.5, R-FORK-1).

Owns: ``tail`` — the records of a file's complete lines from a byte offset on, each with its
position: the file's ``_NNN`` index, its ordinal (0-based among the file's records), its
1-based physical line and the byte offset just after its line — and where to continue.  A
follower (``penguin inspect --follow``, the server's index and streams) calls it again with
what the last call returned and reads only what was appended since.  Does not: decode a line
(``_codec``), merge several files (``_reader``), or watch the file system.

The reader's line rules (``_reader``), applied line by line: a UTF-8 BOM at offset 0 is
skipped; blank lines are skipped without a diagnostic; a line that does not decode, nor does
trimmed, is skipped with a ``malformed`` diagnostic; a line longer than ``max_line_bytes`` is
malformed and never held whole.  An unterminated last line is not consumed: it is either torn
(never a record, R-READ-2) or still being written, and the next call reads it once it ends.
So the ordinals agree with ``read_trace`` of the file.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import Final

import msgspec

from ._codec import decode
from ._diagnostics import Diagnostic
from ._reader import MAX_LINE_BYTES, _salvage, file_index
from ._schema import OmniMessage

__all__ = ["TailRead", "TailRecord", "complete_lines", "tail"]

_CHUNK: Final = 1 << 20
_BOM: Final = b"\xef\xbb\xbf"


class TailRecord(msgspec.Struct, frozen=True):
    """One record and where it is: ``(file, ordinal)`` is its trace coordinate (R-FORK-1),
    ``line`` its 1-based physical line, ``end_offset`` the byte offset just after its line."""

    file: int
    ordinal: int
    line: int
    end_offset: int
    record: OmniMessage


class TailRead(msgspec.Struct):
    """What ``tail`` read: the records and diagnostics of the complete lines after the given
    offset, and the cursor to continue from (``offset``, ``ordinal``, ``line``: pass them to the
    next call)."""

    path: Path
    records: list[TailRecord]
    diagnostics: list[Diagnostic]
    offset: int
    ordinal: int
    line: int
    #: Bytes after ``offset`` that are not blank: an unterminated last line, torn or still
    #: being written (a follower that knows the file is final reports it as a torn tail).
    unterminated: bool = False

    def more(self) -> TailRead:
        """What was appended since this read (the next ``tail`` call)."""
        return tail(self.path, self.offset, ordinal=self.ordinal, line=self.line)


def tail(
    path: str | os.PathLike[str],
    offset: int = 0,
    *,
    ordinal: int = 0,
    line: int = 0,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> TailRead:
    """The records of ``path``'s complete lines from byte ``offset`` on, with their positions.

    ``offset`` must be 0 or an offset a previous call returned (a line boundary); ``ordinal``
    and ``line`` are the record ordinal and physical-line count reached there (both 0 at the
    start).  A file shorter than ``offset`` (replaced, or emptied) yields nothing and keeps the
    cursor.  Raises ``FileNotFoundError`` when the file does not exist."""
    p = Path(path)
    index = file_index(p) or 1
    records: list[TailRecord] = []
    diagnostics: list[Diagnostic] = []
    carry = b""
    skipping = False  # inside a line over the limit: its bytes are dropped
    with open(p, "rb") as f:
        f.seek(offset)
        start = offset  # the file offset of ``carry``'s first byte
        while chunk := f.read(_CHUNK):
            if start == 0 and not carry and not skipping and chunk.startswith(_BOM):
                chunk = chunk[len(_BOM) :]
                start = len(_BOM)
            data = carry + chunk if carry else chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                if skipping or len(data) > max_line_bytes:
                    skipping, carry = True, b""
                    start += len(data)  # dropped: the next byte read is at this offset
                else:
                    carry = data
                continue
            pos = start
            for raw in data[: cut + 1].split(b"\n")[:-1]:
                pos += len(raw) + 1
                line += 1
                if skipping:
                    skipping = False
                    diagnostics.append(
                        Diagnostic(p, line, "malformed", f"line longer than {max_line_bytes} bytes")
                    )
                    continue
                record = _record(raw, max_line_bytes, p, line, diagnostics)
                if record is not None:
                    records.append(TailRecord(index, ordinal, line, pos, record))
                    ordinal += 1
            offset = start = pos
            carry = data[cut + 1 :]
            if len(carry) > max_line_bytes:
                skipping, carry = True, b""
                start += len(data) - cut - 1
    unterminated = skipping or bool(carry.strip())
    return TailRead(p, records, diagnostics, offset, ordinal, line, unterminated)


def _record(
    raw: bytes, limit: int, path: Path, line: int, diagnostics: list[Diagnostic]
) -> OmniMessage | None:
    if len(raw) > limit:
        diagnostics.append(Diagnostic(path, line, "malformed", f"line longer than {limit} bytes"))
        return None
    try:
        return decode(raw)
    except Exception as exc:
        salvaged = _salvage(raw, exc)
    if salvaged is None or isinstance(salvaged, OmniMessage):
        return salvaged
    diagnostics.append(Diagnostic(path, line, "malformed", salvaged))
    return None


def complete_lines(path: str | os.PathLike[str]) -> Generator[tuple[int, bytes], None, None]:
    """``(line, bytes)`` for every physical line of ``path`` that ends with ``\\n``, in order,
    without its newline, a leading UTF-8 BOM removed: the bytes exactly as written, blank and
    malformed lines included (a copy keeps them); an unterminated last line is never one.
    Holds one line at a time."""
    with open(path, "rb") as f:
        for n, line in enumerate(f, start=1):
            if not line.endswith(b"\n"):
                return
            if n == 1 and line.startswith(_BOM):
                line = line[len(_BOM) :]
            yield n, line[:-1]
