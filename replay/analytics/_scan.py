"""The analytics cache's listing of a data root: which trace files there are, and which changed.

Owns: walking ``<project>/agents/<agent>/traces/<date>/`` (the rules of ``_sources``: R-ROOT-2,
R-ROOT-4, R-ROOT-6, R-ROOT-9), each date directory's listing -- every session's files as stat
keys ``(name, size, mtime_ns, inode)``, oldest first -- and reusing a recorded listing while
the directory's inode and modification time are unchanged; saying which sessions changed.
Does not: read a trace file, decide whether cached lines are still valid (``_cache``), or fetch
an archived file back.

Why this is enough to notice a change (SPEC R-ROOT-3, R-TRACE-8):

- Creating, deleting or renaming a file changes its directory's modification time, so a
  directory whose ``(inode, mtime_ns)`` is the recorded one holds the same names (archive
  records too: they are replaced by a rename).  A listing taken less than ``_RACY_NS`` after
  the directory last changed is recorded with mtime -1, which no stat matches: a change in the
  same clock tick is never missed ("racy git").  A directory holding a symlinked trace file is
  listed every time (its target can change with no change here).
- All files of a session live in one directory, and only its highest-index file is ever
  written: a closed (rotated) file is immutable.  In an unchanged directory only each session's
  latest local file is stat'ed; a directory listed again has every file stat'ed.  A closed file
  rewritten in place, against that rule, is not noticed until its directory changes.
- A file its session's archive record names and that is not on disk (``eventstore.archive``)
  keys as the record's size and mtime with inode ``-1``: it is immutable, and nothing is
  fetched to list it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import msgspec

from eventstore import OutsideCheck, parse_trace_name
from eventstore.archive import RECORD_SUFFIX, ArchiveError, read_record, record_path

from ._sources import TraceFile, _dirs, _scandir

__all__ = ["ARCHIVED", "UNTRUSTED", "Dir", "Key", "Scan", "scan_root"]

# A listing younger than this may still change within the same mtime tick.
_RACY_NS: Final = 2_000_000_000
#: The inode of a key that describes an archived file (from its record entry).
ARCHIVED: Final = -1
#: The mtime of a listing not to be used again (no directory has it, not even one dated 1970).
UNTRUSTED: Final = -1

Key = tuple[str, int, int, int]  # name, size, mtime_ns, inode (ARCHIVED: from the record)


class Dir(msgspec.Struct, array_like=True):
    """One date directory's listing: the directory's inode and mtime (``UNTRUSTED``: list it again),
    where it is in the layout, and each session's files, oldest first."""

    ino: int
    mtime_ns: int
    project: str
    agent: str
    date: str
    sessions: dict[str, list[Key]]


@dataclass(slots=True)
class Scan:
    """A root's listing (``dirs``, keyed by directory path), the sessions whose keys differ
    from the recorded listing (``changed``), every session seen (``present``), and whether a
    listing differs from the recorded one at all (``relisted``: worth recording)."""

    dirs: dict[str, Dir]
    changed: set[str] = field(default_factory=set)
    present: set[str] = field(default_factory=set)
    relisted: bool = False

    def files(self, sessions: set[str] | None = None) -> list[TraceFile]:
        """The trace files of ``sessions`` (all when ``None``)."""
        return [f for f, _key in self.keyed(sessions)]

    def keyed(self, sessions: set[str] | None = None) -> Iterator[tuple[TraceFile, Key]]:
        for path, d in self.dirs.items():
            for sid, keys in d.sessions.items():
                if sessions is not None and sid not in sessions:
                    continue
                for key in keys:
                    parsed = parse_trace_name(key[0])
                    index = parsed[1] if parsed is not None else 0
                    name = f"{path}/{key[0]}"
                    yield TraceFile(name, sid, index, d.project, d.agent, d.date), key

    def sessions_of(self, *, project: str | None, agent: str | None) -> set[str]:
        return {
            sid
            for d in self.dirs.values()
            if (project is None or d.project == project) and (agent is None or d.agent == agent)
            for sid in d.sessions
        }


def scan_root(home: str | os.PathLike[str], known: dict[str, Dir]) -> Scan:
    """List the root ``home``, reusing the listings ``known`` (keyed by directory path) where
    they still hold; ``changed`` names every session whose files differ from ``known``."""
    root = Path(home).expanduser().absolute()
    inside = OutsideCheck(root.resolve(), skip=True)
    now = time.time_ns()
    out = Scan({})
    for project in _dirs(root, inside):
        agents = root / project / "agents"
        for agent in _dirs(agents, inside):
            traces = agents / agent / "traces"
            for date in _dirs(traces, inside):
                path = str(traces / date)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                old = known.get(path)
                if old is not None and old.mtime_ns == st.st_mtime_ns and old.ino == st.st_ino:
                    restated = _restat(path, old)
                    if restated is not None:
                        listing, grown = restated
                        out.dirs[path] = listing
                        out.present.update(listing.sessions)
                        out.changed.update(grown)
                        continue
                listing = _list(path, st, project, agent, date, inside, now)
                out.relisted = out.relisted or listing != old
                out.dirs[path] = listing
                _compare(listing, old, out)
    # A session in a directory that is gone, or gone from its directory.
    for path, old in known.items():
        if path not in out.dirs:
            out.changed.update(old.sessions)
            out.relisted = True
    return out


def _compare(listing: Dir, old: Dir | None, out: Scan) -> None:
    before = old.sessions if old is not None else {}
    for sid, keys in listing.sessions.items():
        out.present.add(sid)
        if before.get(sid) != keys:
            out.changed.add(sid)
    for sid in before:
        if sid not in listing.sessions:
            out.changed.add(sid)


def _restat(path: str, old: Dir) -> tuple[Dir, list[str]] | None:
    """``old`` with each session's latest local file stat'ed again (the only file a writer
    appends to) and the sessions whose latest file changed, or ``None`` when one is missing
    (list the directory again)."""
    sessions = old.sessions
    copied = False
    grown: list[str] = []
    for sid, keys in sessions.items():
        i = len(keys) - 1
        while i >= 0 and keys[i][3] == ARCHIVED:
            i -= 1
        if i < 0:
            continue  # every file archived: immutable
        name, size, mtime_ns, ino = keys[i]
        try:
            st = os.stat(f"{path}/{name}")
        except OSError:
            return None
        if st.st_size != size or st.st_mtime_ns != mtime_ns or st.st_ino != ino:
            if not copied:
                sessions, copied = dict(sessions), True
            fresh = list(keys)
            fresh[i] = (name, st.st_size, st.st_mtime_ns, st.st_ino)
            sessions[sid] = fresh
            grown.append(sid)
    if not copied:
        return old, grown
    return Dir(old.ino, old.mtime_ns, old.project, old.agent, old.date, sessions), grown


def _list(
    path: str,
    st: os.stat_result,
    project: str,
    agent: str,
    date: str,
    inside: OutsideCheck,
    now: int,
) -> Dir:
    """The directory listed and every trace file in it stat'ed."""
    trusted = now - st.st_mtime_ns > _RACY_NS
    found: dict[str, list[tuple[int, Key]]] = {}
    records: list[str] = []
    names: set[str] = set()
    for entry in _scandir(Path(path)):
        names.add(entry.name)
        parsed = parse_trace_name(entry.name)
        if parsed is None or not entry.is_file():
            if entry.name.endswith(RECORD_SUFFIX):
                records.append(entry.name)
            continue
        if entry.is_symlink():
            trusted = False  # the link's target can change with no change here
            if not inside(Path(entry.path)):
                continue
        try:
            fst = entry.stat()
        except OSError:
            continue  # deleted since the listing
        key = (entry.name, fst.st_size, fst.st_mtime_ns, fst.st_ino)
        found.setdefault(parsed[0], []).append((parsed[1], key))
    for record in sorted(records):
        # What ``fetch_missing`` would fetch back (and its errors), described, not fetched.
        sid = record.removesuffix(RECORD_SUFFIX)
        for archived in read_record(Path(path) / record):
            parsed = parse_trace_name(archived.name)
            if archived.name in names or parsed is None:
                continue
            if "/" in archived.name or archived.name.startswith("."):
                raise ArchiveError(
                    f"archive record names a file outside its directory: {archived.name!r}",
                    path=record_path(Path(path), sid),
                )
            key = (archived.name, archived.size, archived.mtime_ns, ARCHIVED)
            found.setdefault(parsed[0], []).append((parsed[1], key))
    sessions = {sid: [key for _i, key in sorted(keys)] for sid, keys in sorted(found.items())}
    return Dir(st.st_ino, st.st_mtime_ns if trusted else UNTRUSTED, project, agent, date, sessions)
