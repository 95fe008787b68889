"""Reading a session's trace for the server: positions, gaps, history pages.

Owns: which of a session's files a position range touches.  The ``(file, ordinal)``
coordinates of records (file = the ``_NNN`` index, ordinal = the 0-based position among the
file's records, as ``read_trace`` of that file lists them) come from ``eventstore.tail``.
Serves the records between two positions (a lossless reconnect, R-SRV-8) and one file's records
(history, R-SRV-6).  Does not: decide what to send.  Blocking: call through
``anyio.to_thread``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from eventstore import OmniMessage, file_index, tail

__all__ = ["indexed_files", "last_position", "records_between", "records_of"]


def indexed_files(files: list[Path]) -> list[tuple[int, Path]]:
    return sorted(((file_index(p) or 0), p) for p in files)


def records_of(path: Path) -> list[OmniMessage]:
    return [t.record for t in tail(path).records]


def last_position(files: list[Path]) -> tuple[int, int]:
    """The position of the last record of the highest file that has one; ``(0, 0)`` if none."""
    for index, path in reversed(indexed_files(files)):
        count = tail(path).ordinal
        if count:
            return index, count - 1
    return 0, 0


def records_between(
    files: list[Path], after: tuple[int, int], upto: tuple[int, int]
) -> Iterator[tuple[int, int, OmniMessage]]:
    """Records whose position is in ``(after, upto]``, in trace order."""
    for index, path in indexed_files(files):
        if index < after[0] or index > upto[0]:
            continue
        for t in tail(path).records:
            pos = (index, t.ordinal)
            if pos > upto:
                break
            if pos > after:
                yield index, t.ordinal, t.record
