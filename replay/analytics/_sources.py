"""Which trace files the views read.

Owns: listing trace files under a data root (R-ROOT-2 layout, the R-ROOT-4 file-name rule, the
R-ROOT-6 id check, R-ROOT-9: a symlink that resolves outside the root is refused) or matching a
glob, and describing each file by session, project, agent, date directory and index.  Does not:
open or read a file (DuckDB does, in ``_views``).

Listing is ``os.scandir`` only -- no file is opened here -- so it stays cheap for a fleet; a
directory with an archive record has its archived files fetched back first.
"""

from __future__ import annotations

import glob as globlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from eventstore import OutsideCheck, parse_trace_name, validate_id
from eventstore.archive import RECORD_SUFFIX, fetch_missing

__all__ = ["TraceFile", "files_from_glob", "files_from_root"]

_LAYOUT: Final = re.compile(
    r"(?:^|/)(?P<project>[^/]+)/agents/(?P<agent>[^/]+)/traces/(?P<date>[^/]+)/[^/]+\Z"
)


@dataclass(frozen=True, slots=True)
class TraceFile:
    """One trace file.  ``index`` is 0 for a name without ``_NNN`` (read before numbered ones,
    as ``read_trace`` orders them); ``project``/``agent``/``date`` are ``None`` outside the
    data-root layout."""

    path: str
    session_id: str
    index: int
    project: str | None
    agent: str | None
    date: str | None


def _describe(path: Path) -> TraceFile:
    parsed = parse_trace_name(path)
    sid, index = parsed if parsed is not None else (path.name.removesuffix(".jsonl"), 0)
    lay = _LAYOUT.search(path.as_posix())
    return TraceFile(
        path=str(path),
        session_id=sid,
        index=index,
        project=lay.group("project") if lay else None,
        agent=lay.group("agent") if lay else None,
        date=lay.group("date") if lay else None,
    )


def files_from_root(home: str | os.PathLike[str]) -> list[TraceFile]:
    """Every ``<project>/agents/<agent>/traces/<date>/<id>_<NNN>.jsonl`` under ``home``;
    ``*.lock`` and other names are ignored (R-TRACE-18a).  A missing root has none."""
    root = Path(home).expanduser().absolute()
    # The store's one symlink rule (R-ROOT-9): a link resolving outside the root is left out
    # with an OutsideRootWarning, as DataRoot's listings do.
    inside = OutsideCheck(root.resolve(), skip=True)
    found: list[TraceFile] = []
    for project in _dirs(root, inside):
        agents = root / project / "agents"
        for agent in _dirs(agents, inside):
            traces = agents / agent / "traces"
            for date in _dirs(traces, inside):
                entries = _scandir(traces / date)
                archived = False
                for entry in entries:
                    parsed = parse_trace_name(entry.name)
                    if parsed is None or not entry.is_file():
                        archived = archived or entry.name.endswith(RECORD_SUFFIX)
                        continue
                    if entry.is_symlink() and not inside(Path(entry.path)):
                        continue
                    # Described from the walk, not by ``_describe``: a Path per file costs more
                    # than the rest of a warm cached report (``_cache``).
                    found.append(TraceFile(entry.path, parsed[0], parsed[1], project, agent, date))
                if archived:
                    found.extend(_archived(traces / date, entries))
    return found


def _archived(directory: Path, entries: list[os.DirEntry[str]]) -> list[TraceFile]:
    """The files archived to object storage from ``directory``, fetched back (as every reader
    of the store gets them: ``eventstore.archive``)."""
    present = {e.name for e in entries}
    fetched: list[TraceFile] = []
    for name in sorted(present):
        if name.endswith(RECORD_SUFFIX):
            sid = name.removesuffix(RECORD_SUFFIX)
            fetched.extend(_describe(p) for p in fetch_missing(directory, sid, present))
    return fetched


def files_from_glob(pattern: str) -> list[TraceFile]:
    """Files matching ``pattern`` (``**`` allowed; ``~`` expanded), sorted."""
    paths = sorted(globlib.glob(os.path.expanduser(pattern), recursive=True))
    return [_describe(Path(p).absolute()) for p in paths if os.path.isfile(p)]


def _scandir(parent: Path) -> list[os.DirEntry[str]]:
    try:
        return list(os.scandir(parent))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _dirs(parent: Path, inside: OutsideCheck) -> list[str]:
    names = []
    for entry in _scandir(parent):
        if not _is_id(entry.name) or not entry.is_dir():
            continue
        if entry.is_symlink() and not inside(Path(entry.path)):
            continue
        names.append(entry.name)
    return sorted(names)


def _is_id(name: str) -> bool:
    """R-ROOT-6: only names that may be ids are project, agent and date directories."""
    try:
        validate_id(name)
    except ValueError:
        return False
    return True
