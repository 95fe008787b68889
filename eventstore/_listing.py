"""The cheap listing of a data root: which sessions have which trace files, and the stat of
each session's latest file, without opening any trace file.

Owns: ``FileStat`` and ``SessionFiles`` (what ``DataRoot.listing`` returns) and reading one
``traces/<date>`` directory for it: one ``scandir``, the trace file names parsed, symlinked
entries checked with the store's one rule (R-ROOT-9), archived files (``penguin archive``) listed
where they were with their record's size and mtime, and one ``stat`` per session (its
highest-index file: a rotated file below it is closed and never written again, R-TRACE-4).
Also the two cheap tests of one file that such a host makes: ``file_stat`` and ``edge_digest``
(the bytes at the start of a file and just before where its reading stopped).  Does not: walk
projects and agents (``DataRoot``), decide whether a session exists (a ``session_meta``:
``DataRoot.session_info``), or read a record.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path
from typing import NamedTuple

from ._discovery import OutsideCheck
from ._exceptions import ArchiveError
from ._names import TRACE_NAME, parse_trace_name
from .archive import RECORD_SUFFIX, ArchiveWarning, archived_entry, fetch_missing

__all__ = ["FileStat", "SessionFiles", "edge_digest", "file_stat", "list_directory"]


class FileStat(NamedTuple):
    """A trace file's size, modification time, inode and status-change time (which no one can
    set back: a file written again with its mtime restored still shows a new ``ctime_ns``);
    ``inode`` and ``ctime_ns`` are ``None`` for a file away in an archive (size and mtime from
    its record: the file that left)."""

    size: int
    mtime_ns: int
    inode: int | None
    ctime_ns: int | None


class SessionFiles(NamedTuple):
    """One session as ``DataRoot.listing`` finds it: its trace files (paths, by index; an
    archived file where it was) and the stat of the last of them (``None``: it vanished while
    listed).  Crash residue and sessions without a ``session_meta`` are listed too."""

    project: str
    agent: str
    session_id: str
    files: tuple[str, ...]
    latest: FileStat | None


# One listed file: (index, path, the DirEntry to stat, or None for an archived file).
Listed = tuple[int, str, "os.DirEntry[str] | None"]


def list_directory(directory: Path, check: OutsideCheck) -> dict[str, list[Listed]]:
    """The trace files of ``directory`` by session id (unsorted); ``{}`` when it is gone or
    resolves outside the root (``check`` warns)."""
    try:
        with os.scandir(directory) as it:
            entries = [e for e in it if e.is_file()]
    except (FileNotFoundError, NotADirectoryError):
        return {}
    found: dict[str, list[Listed]] = {}
    records: list[str] = []
    checked = False
    match = TRACE_NAME.match  # parse_trace_name's pattern, without a call per file
    for e in entries:
        name = e.name
        m = match(name)
        if m is None:
            if name.endswith(RECORD_SUFFIX):
                records.append(name.removesuffix(RECORD_SUFFIX))
            continue
        # The directory resolves under the root once; a plain file in it is then inside too.
        if not checked:
            if not check(directory):
                return {}
            checked = True
        if e.is_symlink() and not check(Path(e.path)):
            continue
        sid, index = m.groups()
        if sid in found:
            found[sid].append((int(index), e.path, e))
        else:
            found[sid] = [(int(index), e.path, e)]
    if records and check(directory):
        present = {e.name for e in entries}
        for sid in records:
            try:
                away = fetch_missing(directory, sid, present, fetch=False)
            except ArchiveError as exc:
                warnings.warn(f"skipped {sid}: {exc}", ArchiveWarning, stacklevel=4)
                continue
            for path in away:
                parsed = parse_trace_name(path.name)
                if parsed is not None:
                    found.setdefault(sid, []).append((parsed[1], str(path), None))
    return found


def latest_stat(listed: Listed) -> FileStat | None:
    """The stat of a listed file (following a symlink), or of its archive record's entry."""
    _index, path, entry = listed
    if entry is None:
        record = archived_entry(Path(path))
        return None if record is None else FileStat(record.size, record.mtime_ns, None, None)
    try:
        st = entry.stat()
    except OSError:
        return None
    return FileStat(st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def file_stat(path: str | os.PathLike[str]) -> FileStat | None:
    """The stat of a trace file (following a symlink), ``None`` when it cannot be stat-ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return FileStat(st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def edge_digest(path: str | os.PathLike[str], upto: int, span: int = 4096) -> bytes:
    """The SHA-256 of the first and of the last ``span`` bytes of the first ``upto`` bytes of
    ``path`` (fewer when ``upto`` is smaller; ``b""`` when unreadable): the start says whether
    the file is still the one read, the bytes just before ``upto`` whether a file cut short and
    written again past it still holds what was read there."""
    try:
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read(min(upto, span)))
            if upto > span:
                f.seek(max(span, upto - span))
                digest.update(f.read(upto - f.tell()))
            return digest.digest()
    except OSError:
        return b""
