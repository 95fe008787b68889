"""The exception tree of the trace store.

Owns: every exception ``eventstore`` raises.  Does not: decide when to raise them.

    TraceError                      root: everything the store raises on purpose
    ├── TraceDecodeError            one line is not a record (also a ValueError)
    ├── TraceWriteError             an append or fsync failed; nothing was written (also OSError)
    ├── RecordTooLarge              a record is over the writer's size limit
    ├── SessionLocked               another writer holds the session's lock
    └── ArchiveError                an archived file cannot be fetched or its record read

Context is carried as keyword-only attributes (path, line, session_id, …), never only in text.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "ArchiveError",
    "RecordTooLarge",
    "SessionLocked",
    "TraceDecodeError",
    "TraceError",
    "TraceWriteError",
]


class TraceError(Exception):
    """Root of the trace store's exceptions."""


class TraceDecodeError(TraceError, ValueError):
    """A line that is not an OmniMessage record."""

    def __init__(self, detail: str, *, path: Path | None = None, line: int | None = None) -> None:
        self.detail = detail
        self.path = path
        self.line = line
        where = f"{path}:{line}: " if path is not None and line is not None else ""
        super().__init__(f"{where}{detail}")


class TraceWriteError(TraceError, OSError):
    """A record could not be appended (R-TRACE-15).  The file ends where it ended before."""

    def __init__(
        self, detail: str, *, path: Path, errno: int | None = None, offset: int | None = None
    ) -> None:
        self.detail = detail
        self.path = path
        self.errno = errno
        self.offset = offset
        name = os.strerror(errno) if errno is not None else None
        parts = [f"{path}: {detail}"]
        if name is not None:
            parts.append(f"errno {errno} ({name})")
        if offset is not None:
            parts.append(f"at offset {offset}")
        Exception.__init__(self, ", ".join(parts))

    def __str__(self) -> str:
        return str(self.args[0])


class RecordTooLarge(TraceError):
    """A record whose encoded size exceeds ``max_record_bytes`` (R-TRACE-17)."""

    def __init__(self, *, size: int, limit: int, path: Path | None = None) -> None:
        self.size = size
        self.limit = limit
        self.path = path
        super().__init__(f"record too large ({size} bytes; limit {limit} bytes)")


class SessionLocked(TraceError):
    """Another writer holds the session (R-TRACE-18)."""

    def __init__(self, *, session_id: str, holder_pid: int | None, path: Path) -> None:
        self.session_id = session_id
        self.holder_pid = holder_pid
        self.path = path
        holder = f"process {holder_pid}" if holder_pid is not None else "another process"
        super().__init__(f"session {session_id} is locked by {holder} ({path})")


class ArchiveError(TraceError):
    """An archived trace file could not be fetched back, did not match its record, or its
    archive record could not be read (``eventstore.archive``)."""

    def __init__(self, detail: str, *, path: Path | None = None, url: str | None = None) -> None:
        self.detail = detail
        self.path = path
        self.url = url
        where = f"{path}: " if path is not None else ""
        super().__init__(f"{where}{detail}")
