"""Finding sessions: the listing behind ``penguin sessions``, "the latest session", and id
prefixes.

Owns: turning the session index (``penguin._index``: one walk of the data root, then only the
bytes appended since the last listing are read) into listing rows — the one status (R-SET-5)
with ``running`` asked of the lock, ordering by last activity, the reader's diagnostics (a torn
tail only once no writer holds the session) — and whether a writer holds a session.  Does not:
fold traces (the index does) or print (``commands.sessions``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from eventstore import DataRoot, Diagnostic, SessionInfo, lock_path_of, probe_lock

if TYPE_CHECKING:
    from penguin._index import IndexedSession

__all__ = ["SessionRow", "list_sessions", "recent_sessions", "writer_holds"]


@dataclass(slots=True)
class SessionRow:
    """One listed session.  ``status``: the one status (R-SET-5) — ``running`` (a run is open
    and a writer holds the lock), ``interrupted`` (a run left open by a crash), else how the
    last run ended (``completed``, ``max_turns``, ``aborted``, ``failed``, ``goal_*``…),
    ``idle`` (no run ended yet) — or ``unreadable``."""

    info: SessionInfo
    active: float
    latest: Path
    status: str = "idle"
    records: int = 0
    turns: int = 0
    first_prompt: str | None = None
    max_turns: bool = False  # the last task ended at its turn limit
    last_error: str | None = None  # the last request's error message (its label's source)
    workspace: str | None = None
    last_request_status: str | None = None
    task_running: bool = False
    is_child: bool = False
    open: bool = False
    parent: str | None = None
    children: list[str] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    error: str | None = None
    archived: bool = False  # its last ``session_archived`` mark (``penguin sessions --archive``)

    @property
    def session_id(self) -> str:
        return self.info.session_id


def writer_holds(trace_file: Path) -> bool:
    """Whether a writer has the session of ``trace_file`` open: asked of its lock (R-TRACE-18),
    never of the pid written in it (that outlives the writer).  A lock that cannot be probed
    (a planted symlink, no permission) counts as not held."""
    try:
        return probe_lock(lock_path_of(trace_file)).held
    except (OSError, ValueError):
        return False


def _row(s: IndexedSession) -> SessionRow:
    row = SessionRow(
        info=s.info,
        active=s.active,
        latest=s.latest,
        status=s.status,
        records=s.records,
        turns=s.turns,
        first_prompt=s.title,
        max_turns=s.max_turns,
        last_error=s.last_error,
        workspace=s.workspace,
        last_request_status=s.last_request_status,
        task_running=s.task_running,
        is_child=s.is_child,
        open=s.open,
        children=list(s.children),
        diagnostics=list(s.diagnostics),
        error=s.error,
        archived=s.archived,
    )
    held: bool | None = None
    if row.open and row.error is None:
        # A session left open is running while a writer holds its lock, else interrupted
        # (asked at each listing, never stored in the index).
        held = writer_holds(row.latest)
        row.status = "running" if held else "interrupted"
    for path, line in s.unterminated:
        if path == row.latest and (held if held is not None else writer_holds(path)):
            continue  # a line still being written
        row.diagnostics.append(
            Diagnostic(path, line, "torn_tail", "last line has no terminating newline")
        )
    return row


def list_sessions(
    root: DataRoot,
    *,
    project: str | None = None,
    agent: str | None = None,
    limit: int | None = None,
    top_level: bool = False,
    archived: bool | None = None,
) -> list[SessionRow]:
    """Sessions by last activity (the time of the last record: a copied or imported file's
    modification time says nothing), newest first, at most ``limit``; with ``top_level``
    subagent children are left out (``limit`` then counts top-level sessions); ``archived``:
    only the archived sessions or only the others (``None``: both).  Catches the
    index up first (only what changed since the last listing is read); with ``limit``, only
    those rows are read from it."""
    from penguin._index import Index

    with Index(root) as index:
        index.refresh(project=project, agent=agent)
        listed = index.listed(
            project=project, agent=agent, limit=limit, top_level=top_level, archived=archived
        )
    return [_row(s) for s in listed]


def recent_sessions(
    root: DataRoot,
    *,
    project: str | None = None,
    agent: str | None = None,
    limit: int,
    archived: bool = False,
) -> tuple[list[SessionRow], int]:
    """The ``limit`` most recently active top-level sessions (no listed session names them as
    its child), each followed by its descendants, and how many top-level sessions there are —
    of the archived sessions or of the others:
    ``list_sessions`` cut to what a screen shows, reading only those rows of the index (a
    listing of a large fleet costs its catch-up check, not a row per session)."""
    from penguin._index import Index

    with Index(root) as index:
        index.refresh(project=project, agent=agent)
        listed, tops = index.recent(limit, project=project, agent=agent, archived=archived)
    return [_row(s) for s in listed], tops
