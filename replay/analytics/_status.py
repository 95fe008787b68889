"""The ``status`` column of the ``sessions`` view: the one status (SPEC R-SET-5).

Owns: the ``_status`` table the view joins, filled on first use by folding each session's files
with the projections (``replay._resume.folded_state``: the fold the CLI, the server and resume
use) and asking the session's lock itself whether a writer holds it — so a crashed session reads
``interrupted`` here as everywhere.  The Parquet cache keeps each session's fold as the two
statuses a free and a held lock give (``_cache``): for those, only the lock is asked.  A cached
fleet lists archived files without fetching them
(``_scan``); the fold needs their content, so a session's archived files are fetched back here,
as every reader of the store gets them.  Computed the first time a query reads ``sessions``
(``STATUS_READERS``), like the fold: a report on tool calls never pays for it.  Does not: fold
in SQL (the status rule lives once, in ``projections``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from eventstore import lock_path_of, parse_trace_name, probe_lock
from eventstore.archive import fetch_missing

from ._sources import TraceFile

if TYPE_CHECKING:
    import duckdb

__all__ = ["create_status_table", "reads_sessions", "store_status"]

_SESSIONS: Final = re.compile(r"\bsessions\b", re.IGNORECASE)
# A column named ``sessions`` (the reports' ``count(...) AS sessions``) is not the view.
_ALIAS: Final = re.compile(r"\bas\s+sessions\b", re.IGNORECASE)


def reads_sessions(query: str) -> bool:
    """Whether ``query`` may read the ``sessions`` view (then the statuses are computed)."""
    return _SESSIONS.search(_ALIAS.sub(" ", query)) is not None


def create_status_table(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE OR REPLACE TEMP TABLE _status (session_id VARCHAR, status VARCHAR)")


def _locked(path: Path) -> bool:
    if parse_trace_name(path) is None:
        return False  # not a data root's trace file: no lock beside it
    try:
        return probe_lock(lock_path_of(path)).held
    except (OSError, ValueError):  # a planted symlink, no permission: not held (as the CLI)
        return False


def _fetched(paths: list[Path]) -> None:
    """Fetch back the session's archived files among ``paths`` (all in one directory,
    R-ROOT-3); ``ArchiveError`` when one cannot be, as from any reader."""
    missing = [p for p in paths if not p.exists()]
    parsed = parse_trace_name(paths[-1])
    if missing and parsed is not None:
        directory = paths[-1].parent
        fetch_missing(directory, parsed[0], set(os.listdir(directory)))


def _status_of(paths: list[Path]) -> str:
    from replay._resume import folded_state  # here: the engine is loaded only when needed

    try:
        _fetched(paths)
        state = folded_state(paths)
    except OSError:
        return "unreadable"
    return state.status_given(locked=_locked(paths[-1]))


def store_status(
    con: duckdb.DuckDBPyConnection, files: Sequence[TraceFile], *, cached: str | None = None
) -> None:
    """Fill ``_status`` with each session's status, as of now.  ``cached``: a query of
    ``(session_id, status if the lock is free, status if held)`` the analytics cache keeps
    (``_cache``): those sessions only have their lock probed, the others are folded."""
    by_session: dict[str, list[Path]] = {}
    for f in sorted(files, key=lambda f: (f.session_id, f.index, f.path)):
        by_session.setdefault(f.session_id, []).append(Path(f.path))
    known: dict[str, tuple[str, str]] = {}
    if cached is not None:
        rows = con.execute(cached).fetchall()
        known = {sid: (free, held) for sid, free, held in rows if free is not None}
    ids = list(by_session)
    statuses = [
        (known[sid][1] if _locked(by_session[sid][-1]) else known[sid][0])
        if sid in known
        else _status_of(by_session[sid])
        for sid in ids
    ]
    create_status_table(con)
    if ids:
        con.execute(
            "INSERT INTO _status SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[])",
            [ids, statuses],
        )
