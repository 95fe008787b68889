"""Full-text search over the index (SQLite FTS5).

Owns: the search query — the documents matching an FTS5 query (words, "phrases", prefix*,
AND/OR/NOT, NEAR, parentheses), grouped by session, most recently active first, each session
with its best hit (lowest bm25 rank) as a position ``(file, ordinal)`` and a snippet split into
plain and matching segments (never markup: the text is untrusted); and turning FTS5's parse
errors into ``QuerySyntaxError``.  Does not: escape for a terminal or a page (the caller does),
or catch the index up.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

__all__ = ["Hit", "QuerySyntaxError", "Segment", "parse_since", "search", "segments"]

_OPEN: Final = "\ue000"  # private-use characters mark a match inside the snippet
_CLOSE: Final = "\ue001"
_SNIPPET_TOKENS: Final = 24


class QuerySyntaxError(ValueError):
    """A query FTS5 cannot parse; ``detail`` is SQLite's reason."""

    def __init__(self, query: str, detail: str) -> None:
        super().__init__(f"invalid search query {query!r}: {detail}")
        self.query = query
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Segment:
    text: str
    match: bool


@dataclass(frozen=True, slots=True)
class Hit:
    """One matching session and its best hit: ``position`` is ``(file index, ordinal)``, what
    ``penguin inspect SESSION --at FILE:ORDINAL`` takes; ``kind`` is what matched there
    (``user``, ``assistant``, ``tool_call``, ``tool_output``); ``matches`` counts the
    session's matching documents."""

    session_id: str
    project: str
    agent: str
    title: str | None
    workspace: str | None
    active: float
    status: str
    open: bool
    position: tuple[int, int]
    kind: str
    time: str
    matches: int
    snippet: tuple[Segment, ...]
    latest: str | None = None  # the session's latest trace file (its lock says "running")
    archived: bool = False  # hidden from listings by a session_archived mark (still searched)

    @property
    def at(self) -> str:
        return f"{self.position[0]}:{self.position[1]}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "project": self.project,
            "agent": self.agent,
            "title": self.title,
            "workspace": self.workspace,
            "active": datetime.fromtimestamp(self.active, UTC).isoformat(timespec="seconds"),
            "status": self.status,
            "at": self.at,
            "kind": self.kind,
            "time": self.time,
            "matches": self.matches,
            "snippet": [{"text": s.text, "match": s.match} for s in self.snippet],
            "archived": self.archived,
        }


def search(
    db: sqlite3.Connection,
    query: str,
    *,
    limit: int,
    since: float | None,
    workspace: str | None,
    project: str | None,
    agent: str | None,
) -> list[Hit]:
    if not query.strip():
        raise QuerySyntaxError(query, "give some text to search for")
    where: list[str] = []
    args: list[Any] = [query]
    for clause, value in (
        ("s.active >= ?", since),
        ("s.workspace = ?", workspace),
        ("s.project = ?", project),
        ("s.agent = ?", agent),
    ):
        if value is not None:
            where.append(clause)
            args.append(value)
    # One row per session: SQLite gives the bare columns of the row holding the MIN().  The
    # matches are grouped by session before the sessions are joined (once per session, not per
    # match: a common word matches most messages).
    sql = (
        "SELECT s.id, s.project, s.agent, s.title, s.workspace, s.active, s.status, s.open, "
        "s.latest, s.archived, g.n, g.r, g.rid, g.file, g.ordinal, g.kind, g.time FROM "
        "(SELECT d.skey AS skey, COUNT(*) AS n, MIN(fts.rank) AS r, fts.rowid AS rid, "
        "d.file AS file, d.ordinal AS ordinal, d.kind AS kind, d.time AS time "
        "FROM fts JOIN docs d ON d.rowid = fts.rowid WHERE fts MATCH ? GROUP BY d.skey) g "
        "JOIN sessions s ON s.skey = g.skey "
        f"{'WHERE ' + ' AND '.join(where) if where else ''} "
        "ORDER BY s.active DESC, s.id DESC LIMIT ?"
    )
    try:
        rows = db.execute(sql, (*args, max(1, limit))).fetchall()
        hits: list[Hit] = []
        for (
            sid,
            proj,
            ag,
            title,
            ws,
            active,
            status,
            is_open,
            latest,
            archived,
            n,
            _r,
            rid,
            f,
            o,
            kind,
            t,
        ) in rows:
            (text,) = db.execute(
                f"SELECT snippet(fts, 0, '{_OPEN}', '{_CLOSE}', '…', {_SNIPPET_TOKENS}) "
                "FROM fts WHERE fts MATCH ? AND rowid = ?",
                (query, rid),
            ).fetchone()
            hits.append(
                Hit(
                    session_id=sid,
                    project=proj,
                    agent=ag,
                    title=title,
                    workspace=ws or None,
                    active=float(active or 0.0),
                    status=status,
                    open=bool(is_open),
                    position=(f, o),
                    kind=kind,
                    time=t or "",
                    matches=n,
                    snippet=segments(text or ""),
                    latest=latest,
                    archived=bool(archived),
                )
            )
    except sqlite3.OperationalError as exc:
        raise QuerySyntaxError(query, _reason(str(exc))) from None
    return hits


def _reason(message: str) -> str:
    if message.startswith("fts5: "):
        message = message[len("fts5: ") :]
    if message.startswith("no such column"):
        return f"{message} (a word followed by ':' names a column; quote it: \"word:\")"
    return message


def segments(text: str) -> tuple[Segment, ...]:
    """``text`` with FTS5's match markers as plain and matching segments."""
    out: list[Segment] = []
    rest = text
    while rest:
        start = rest.find(_OPEN)
        if start < 0:
            out.append(Segment(rest, False))
            break
        if start:
            out.append(Segment(rest[:start], False))
        end = rest.find(_CLOSE, start + 1)
        end = len(rest) if end < 0 else end
        out.append(Segment(rest[start + 1 : end], True))
        rest = rest[end + 1 :]
    return tuple(s for s in out if s.text)


_UNITS: Final = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, *, now: float) -> float:
    """``--since`` / ``since=`` as epoch seconds: a duration back from ``now`` (``30m``,
    ``12h``, ``7d``, ``2w``) or an ISO 8601 date or time (``2026-11-30``,
    ``2026-11-30T14:00``, local time unless it names its zone).  ``ValueError`` otherwise."""
    value = text.strip()
    unit = _UNITS.get(value[-1:].lower())
    if unit is not None and value[:-1].isdigit():
        return now - int(value[:-1]) * unit
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"invalid time {text!r}: give a duration (30m, 12h, 7d, 2w) or a date "
            "(2026-11-30, 2026-11-30T14:00)"
        ) from None
    return when.timestamp()
