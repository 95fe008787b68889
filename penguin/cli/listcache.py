"""A cache of per-session listing summaries, so that ``penguin sessions`` re-reads only the
sessions whose files changed.

Owns: ``<home>/.cache/sessions-v1.json`` — one entry per session, valid while every one of
its files has the recorded size and modification time (nanoseconds) — loading it, and writing
it back atomically (0600 in a 0700 directory).  The cache is an optimisation only: a missing,
unreadable or foreign file is ignored, an unwritable root is not an error, and a trace is
never touched.  ``.cache`` is not a valid project name, so the layout never mistakes it for one.
Does not: summarize a session (``listing``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import msgspec

from eventstore import write_private

__all__ = ["Cached", "ListCache", "file_keys"]

_DIR: Final = ".cache"
_NAME: Final = "sessions-v2.json"  # v2: ``active`` is the last record's time

FileKey = tuple[str, int, int]


class Cached(msgspec.Struct, frozen=True):
    """A summary as ``listing.summarize`` found it (``open``: a request, compaction or task
    was left open; whether it is ``running`` is decided again at each listing)."""

    files: list[FileKey]
    status: str
    open: bool
    records: int
    turns: int
    first_prompt: str | None
    workspace: str | None
    last_request_status: str | None
    task_running: bool
    is_child: bool
    children: list[str]
    diagnostics: list[tuple[str, int, str, str]]
    latest: str
    error: str | None = None
    active: float | None = None  # the last record's time (epoch seconds)
    last_error: str | None = None  # the last request's error message


# 2: ``status`` is the one status of R-SET-5 (was the last request's).
_VERSION = 2


class _File(msgspec.Struct):
    version: int = _VERSION
    sessions: dict[str, Cached] = msgspec.field(default_factory=dict)


def file_keys(files: list[Path]) -> list[FileKey] | None:
    keys: list[FileKey] = []
    for f in files:
        try:
            st = f.stat()
        except OSError:
            return None
        keys.append((str(f), st.st_size, st.st_mtime_ns))
    return keys


class ListCache:
    def __init__(self, home: Path) -> None:
        self._path = home / _DIR / _NAME
        self._old: dict[str, Cached] = {}
        self._new: dict[str, Cached] = {}
        try:
            cached = msgspec.json.decode(self._path.read_bytes(), type=_File)
            self._old = cached.sessions if cached.version == _VERSION else {}
        except (OSError, msgspec.DecodeError):
            self._old = {}

    def get(self, key: str, files: list[FileKey]) -> Cached | None:
        hit = self._old.get(key)
        if hit is not None and [tuple(f) for f in hit.files] == files:
            self._new[key] = hit
            return hit
        return None

    def put(self, key: str, entry: Cached) -> None:
        self._new[key] = entry

    def save(self, *, complete: bool) -> None:
        """Write the entries used or made by this listing (all of them, when it listed every
        session; else merged into the old ones).  Failures are ignored."""
        merged = self._new if complete else {**self._old, **self._new}
        if merged == self._old:
            return
        try:
            write_private(self._path, msgspec.json.encode(_File(sessions=merged)))
        except OSError:
            return
