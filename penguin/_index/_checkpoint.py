"""A trace file's checkpoint in the index, and the cheap test that a session did not change.

Owns: the session key, a file's ``Stat`` (size, mtime, inode, ctime), the head hash (both read by
the store: ``eventstore.file_stat``, ``edge_digest``), ``Checkpoint`` (where the fold of a file
stopped) and ``unchanged`` (a session of ``DataRoot.listing()`` has the files its checkpoints
name and its latest file their stat: no read, no fold).  Imports nothing of the library layers
above the store.  Does not: fold or write (``_catchup``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from eventstore import SessionFiles, edge_digest, file_stat

__all__ = ["HEAD_BYTES", "Checkpoint", "Stat", "head_hash", "session_key", "stat", "unchanged"]

#: The checkpoint's hash covers this many bytes at the start of a file and as many before the
#: checkpoint (or the folded bytes, if fewer): a file rewritten with other bytes there is folded
#: again.
HEAD_BYTES: Final = 4096


def session_key(project: str, agent: str, session_id: str) -> str:
    """One session's key: ids are unique per agent only (R-ROOT-7)."""
    return f"{project}/{agent}/{session_id}"


@dataclass(slots=True)
class Stat:
    size: int
    mtime_ns: int
    inode: int
    ctime_ns: int


@dataclass(slots=True)
class Checkpoint:
    file: int
    stat: Stat
    offset: int
    ordinal: int
    line: int
    head: bytes
    residue: bool
    unterminated: bool


def stat(path: Path) -> Stat | None:
    st = file_stat(path)
    return None if st is None else Stat(st.size, st.mtime_ns, st.inode or 0, st.ctime_ns or 0)


def head_hash(path: Path, upto: int) -> bytes:
    """``eventstore.edge_digest``: the hash of the first and of the last ``HEAD_BYTES`` of the
    first ``upto`` bytes of ``path``."""
    return edge_digest(path, upto, HEAD_BYTES)


def unchanged(listed: SessionFiles, known: Mapping[str, tuple[Any, ...]], count: int) -> bool:
    """Whether the session's files are the ones its ``count`` checkpoints name and its latest
    file has its checkpoint's size, mtime, inode and ctime (``known``: the ``files`` rows by
    path, from ``SELECT path, skey, size, mtime_ns, inode, ctime_ns``) —
    the cheap test a refresh makes before taking the write lock.  A file away in an archive
    (``penguin archive``) compares its record's size and mtime: its inode left with it."""
    files = listed.files
    if count != len(files) or listed.latest is None:
        return False
    for path in files[:-1]:
        if path not in known:
            return False
    row = known.get(files[-1])
    if row is None:
        return False
    size, mtime_ns, inode, ctime_ns = listed.latest
    if inode is None:
        return bool(row[2] == size and row[3] == mtime_ns)
    return bool(row[2] == size and row[3] == mtime_ns and row[4] == inode and row[5] == ctime_ns)
