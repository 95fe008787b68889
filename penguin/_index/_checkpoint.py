"""A trace file's checkpoint in the index, and the cheap test that a session did not change.

Owns: the session key, a file's ``Stat`` (size, mtime, inode), the head hash, ``Checkpoint``
(where the fold of a file stopped) and ``unchanged`` (every file has its checkpoint's stat: no
read, no fold).  Imports nothing of the library layers.  Does not: fold or write (``_catchup``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from eventstore import SessionInfo

if TYPE_CHECKING:
    from eventstore.archive import ArchivedFile

__all__ = ["HEAD_BYTES", "Checkpoint", "Stat", "head_hash", "session_key", "stat", "unchanged"]

#: The checkpoint's head hash covers this many bytes (or the folded bytes, if fewer): a file
#: rewritten in place with other bytes there is folded again.
HEAD_BYTES: Final = 4096


def session_key(project: str, agent: str, session_id: str) -> str:
    """One session's key: ids are unique per agent only (R-ROOT-7)."""
    return f"{project}/{agent}/{session_id}"


@dataclass(slots=True)
class Stat:
    size: int
    mtime_ns: int
    inode: int


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
    try:
        st = path.stat()
    except OSError:
        return None
    return Stat(st.st_size, st.st_mtime_ns, st.st_ino)


def head_hash(path: Path, upto: int) -> bytes:
    """The hash of the first ``min(upto, HEAD_BYTES)`` bytes of ``path`` (b"" when unreadable)."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read(min(upto, HEAD_BYTES))).digest()
    except OSError:
        return b""


def unchanged(info: SessionInfo, known: dict[str, tuple[int, int, int]]) -> bool:
    """Whether every file of the session has its checkpoint's size, mtime and inode (and no
    file came or went): the cheap test a refresh makes before taking the write lock."""
    if len(known) != len(info.files):
        return False
    for f in info.files:
        seen = known.get(str(f))
        st = stat(f)
        if st is None and seen is not None:
            # Archived to object storage (``penguin archive``): unchanged when the record says
            # the file that left is the one indexed (its inode is gone with it).
            entry = _archived_entry(f)
            if entry is not None and (entry.size, entry.mtime_ns) == seen[:2]:
                continue
        if seen is None or st is None or seen != (st.size, st.mtime_ns, st.inode):
            return False
    return True


def _archived_entry(path: Path) -> ArchivedFile | None:
    from eventstore.archive import archived_entry

    return archived_entry(path)
