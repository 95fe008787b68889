"""The one session index of a data root, shared by the CLI and the server.

Owns: ``Index`` — opening ``<home>/index.sqlite3`` (in memory when the root is read-only),
``refresh`` (one walk of the root: sessions whose files changed are caught up, sessions whose
files are gone are removed) and the reads: session rows (the server's and the listing's), usage
and error rows, and full-text search (``_search``).  Thread-safe: a refresh writes on its own
connection while readers use another (WAL).  Does not: hold any truth of its own (delete the
files and the same rows come back), or know what is running (a reader asks the lock of a
session whose run is open).
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
import warnings
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from eventstore import DataRoot, Diagnostic, SessionInfo, lock_path_of, probe_lock

from ._checkpoint import session_key, unchanged
from ._costs import priced_groups, priced_sessions
from ._schema import connect
from ._search import Hit, search

if TYPE_CHECKING:
    from projections import Price

__all__ = ["Index", "IndexedSession", "SESSION_COLUMNS"]

#: The server's session row (its OpenAPI ``SessionRow``), in this order.
SESSION_COLUMNS: Final = [
    "id",
    "project",
    "agent",
    "created",
    "files",
    "records",
    "turns",
    "last_status",
    "model",
    "workspace",
    "tokens",
    "last_active",
    "status",
    "approval",
    "runs",
    # Records skipped as damage (``eventstore.unrecognised``), as the CLI and the validator
    # report them; a newer writer's record type is kept and is not counted.
    "unreadable",
    # The last ``session_archived`` mark (Web App "Archive"): hidden from the default listing.
    "archived",
]

# The server's row plus the first prompt (the sessions list shows it when there is no title)
# and whether a subagent made the session.
_ROW_SQL: Final = ", ".join([*SESSION_COLUMNS, "title", "is_child"])

_LISTED: Final = (
    "skey, id, project, agent, created, active, status, open, records, turns, title, max_turns, "
    "last_error, workspace, last_status, task_running, is_child, children, diagnostics, latest, "
    "error, archived"
)


@dataclass(slots=True)
class IndexedSession:
    """One session as the listing reads it from the index.  ``status`` is the one status from
    the records (R-SET-5); with ``open`` it is ``interrupted`` until a reader finds the lock held
    (then ``running``).  ``residue``: the latest file is crash residue; ``unterminated``: files
    whose last line has no newline yet."""

    info: SessionInfo
    active: float
    latest: Path
    status: str
    open: bool
    records: int
    turns: int
    title: str | None
    max_turns: bool
    last_error: str | None
    workspace: str | None
    last_request_status: str | None
    task_running: bool
    is_child: bool
    children: list[str]
    diagnostics: list[Diagnostic]
    error: str | None
    unterminated: list[tuple[Path, int]] = field(default_factory=list)
    archived: bool = False


class Index:
    """The index of ``root``; every method blocks (a server calls them in a worker thread)."""

    def __init__(self, root: DataRoot, path: Path | None = None) -> None:
        self.root = root
        self.path: Path | None = path or root.home / "index.sqlite3"
        try:
            if path is None:
                root.ensure_dir(root.home)
            self._writer = connect(self.path)
            self._reader = connect(self.path)
        except (OSError, sqlite3.Error):
            # A read-only root (or a disk that refuses): the same projection, in memory.
            self.path = None
            self._writer = self._reader = connect(None)
        self._write_lock = threading.Lock()
        self._read_lock = self._write_lock if self.path is None else threading.Lock()
        self._refreshing = threading.Lock()

    def close(self) -> None:
        with self._refreshing, self._write_lock:
            self._writer.close()
            if self._reader is not self._writer:
                with self._read_lock:
                    self._reader.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ catch-up

    def refresh(self, *, project: str | None = None, agent: str | None = None) -> list[str]:
        """Catch up every session (of ``project``/``agent``) whose files changed, and drop the
        rows of sessions whose files are gone; returns the ids whose rows changed.

        Which sessions changed comes from ``DataRoot.listing()`` — one directory listing per
        date directory and one ``stat`` per session — compared with the checkpoints: a session
        whose file names are the ones folded and whose latest file has its checkpoint's size,
        mtime, inode and ctime is not opened.  Rotated files below the latest are closed (R-TRACE-4):
        one rewritten in place is noticed only when the session's latest file changes."""
        with self._refreshing:
            listed = self.root.listing(project=project, agent=agent)
            with self._read_lock:
                rows = self._reader.execute(
                    "SELECT path, skey, size, mtime_ns, inode, ctime_ns FROM files"
                ).fetchall()
            known: dict[str, tuple[Any, ...]] = {r[0]: r for r in rows}
            counts = Counter(r[1] for r in rows)
            walked: set[str] = set()
            todo: list[SessionInfo] = []
            for entry in listed:
                skey = session_key(entry.project, entry.agent, entry.session_id)
                walked.add(skey)
                if not unchanged(entry, known, counts.get(skey, 0)):
                    # Archived files are not fetched to be compared: their records say whether
                    # they are the files indexed; a session to catch up is fetched below.
                    info = self.root.session_info(entry, fetch=False)
                    if info is not None:
                        todo.append(info)
            changed: list[str] = []
            if todo:
                # Only now the folds (and the projections they need) are loaded: a listing of
                # an unchanged root reads the index alone.
                from ._catchup import catch_up, check_shape

                todo = [p for info in todo if (p := self._present(info)) is not None]
                with self._write_lock:
                    check_shape(self._writer)
                    changed += catch_up(self._writer, todo)
            scope = _prefix(project, agent)
            gone = [k for k in counts if k not in walked and k.startswith(scope)]
            changed += self._drop_gone(gone)
            return changed

    def _present(self, info: SessionInfo) -> SessionInfo | None:
        """``info`` with its archived files fetched back (``penguin archive``): catching a
        session up reads them.  ``None``, with an ``ArchiveWarning``, when they cannot be
        fetched: its rows stay as they are.  ``None`` too when the session was deleted since the
        walk (a server's DELETE during a CLI's listing): the next refresh drops its rows."""
        if all(f.exists() for f in info.files):
            return info
        from eventstore.archive import ArchiveError, ArchiveWarning

        try:
            files = self.root.trace_files(info.session_id, project=info.project, agent=info.agent)
        except ArchiveError as exc:
            warnings.warn(f"skipped {info.session_id}: {exc}", ArchiveWarning, stacklevel=3)
            return None
        except FileNotFoundError:
            return None
        return dataclasses.replace(info, files=files)

    def _drop_gone(self, skeys: list[str]) -> list[str]:
        """Remove the rows of the sessions ``skeys`` whose files are all gone; their ids."""
        gone: list[str] = []
        for skey in skeys:
            with self._write_lock:
                db = self._writer
                db.execute("BEGIN IMMEDIATE")
                try:
                    paths = [
                        r[0] for r in db.execute("SELECT path FROM files WHERE skey = ?", (skey,))
                    ]
                    # Another process may have indexed it after this walk: only files that are
                    # really gone remove a session.
                    if paths and not any(Path(p).exists() for p in paths):
                        from ._catchup import delete_session

                        delete_session(db, skey)
                        gone.append(skey.rpartition("/")[2])
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
        return gone

    # ------------------------------------------------------------------ the server's rows

    def session_rows(self) -> list[dict[str, Any]]:
        with self._read_lock:
            cur = self._reader.execute(
                f"SELECT {_ROW_SQL} FROM sessions ORDER BY created DESC, id DESC"
            )
            return [_row(r) for r in cur]

    def session_row(self, sid: str) -> dict[str, Any] | None:
        with self._read_lock:
            r = self._reader.execute(
                f"SELECT {_ROW_SQL} FROM sessions WHERE id = ? ORDER BY skey",
                (sid,),
            ).fetchone()
        return None if r is None else _row(r)

    def usage(
        self,
        *,
        start: str | None,
        end: str | None,
        group_by: str,
        session: str | None,
        prices: Mapping[str, Price] | None = None,
    ) -> list[dict[str, Any]]:
        """Aggregates per ``group_by`` key, each with its estimated cost from ``prices``
        (default: ``projections.DEFAULT_PRICES``) and the tokens of its unpriced models."""
        key = {
            "session": "session",
            "model": "model",
            "day": "substr(time, 1, 10)",
            "hour": "substr(time, 1, 13)",
        }[group_by]
        where, args = _window(start, end, session)
        sql = (
            f"SELECT {key} AS k, model, COUNT(*), SUM(cache_read), SUM(cache_write), SUM(output), "
            f"SUM(total) FROM usage {where} GROUP BY k, model ORDER BY k"
        )
        with self._read_lock:
            rows = self._reader.execute(sql, args).fetchall()
        return priced_groups(rows, _prices(prices))

    def session_costs(
        self, prices: Mapping[str, Price] | None = None
    ) -> dict[str, tuple[float | None, int]]:
        """Each session's estimated cost and unpriced tokens (``projections.priced_total``)."""
        with self._read_lock:
            rows = self._reader.execute(
                "SELECT session, model, SUM(cache_read), SUM(cache_write), SUM(output), "
                "SUM(total) FROM usage GROUP BY session, model"
            ).fetchall()
        return priced_sessions(rows, _prices(prices))

    def usage_rows(self) -> list[tuple[Any, ...]]:
        """Every usage row: (session, agent, model, kind, cache_read, cache_write, output,
        total, time, file, ordinal)."""
        with self._read_lock:
            return self._reader.execute(
                "SELECT session, agent, model, kind, cache_read, cache_write, output, total, "
                "time, file, ordinal FROM usage ORDER BY session, file, ordinal"
            ).fetchall()

    def errors(
        self, *, start: str | None, end: str | None, session: str | None
    ) -> list[dict[str, Any]]:
        where, args = _window(start, end, session)
        with self._read_lock:
            rows = self._reader.execute(
                f"SELECT session, status, message, time FROM errors {where} "
                "ORDER BY time, session, file, ordinal",
                args,
            ).fetchall()
        return [{"session": s, "status": st, "message": m, "time": t} for s, st, m, t in rows]

    # ------------------------------------------------------------------ the listing

    def listed(
        self,
        *,
        project: str | None = None,
        agent: str | None = None,
        limit: int | None = None,
        top_level: bool = False,
        archived: bool | None = None,
    ) -> list[IndexedSession]:
        """Every indexed session (of ``project``/``agent``), most recently active first; at
        most ``limit`` (then only those rows are read); with ``top_level``, no subagent's;
        ``archived``: only the archived sessions, or only the others (``None``: both)."""
        clauses, args = _scope(project, agent)
        if top_level:
            clauses = f"{clauses} AND is_child = 0" if clauses else "WHERE is_child = 0"
        if archived is not None:  # always 0 or 1 (the fold's flag)
            flag = f"archived = {int(archived)}"
            clauses = f"{clauses} AND {flag}" if clauses else f"WHERE {flag}"
        cut = "" if limit is None else f" LIMIT {int(limit)}"
        with self._read_lock:
            rows = self._reader.execute(
                f"SELECT {_LISTED} FROM sessions {clauses} ORDER BY active DESC, id DESC{cut}",
                args,
            ).fetchall()
            if limit is not None:
                files = self._files_of([r[0] for r in rows])
            else:
                files = {}
                for skey, path, residue, unterm, line in self._reader.execute(
                    "SELECT skey, path, residue, unterminated, line FROM files ORDER BY skey, file"
                ):
                    files.setdefault(skey, []).append((path, bool(residue), bool(unterm), line))
        return [_listed(row, files.get(row[0], [])) for row in rows]

    def recent(
        self,
        limit: int,
        *,
        project: str | None = None,
        agent: str | None = None,
        archived: bool = False,
    ) -> tuple[list[IndexedSession], int]:
        """The ``limit`` most recently active sessions (of ``project``/``agent``, archived or
        not) that no such session names as its child, each followed by its descendants (8
        levels), and how many such top-level sessions there are in all: what ``listed()``
        gives for them, reading only their rows (the parents' through a partial index),
        whatever the fleet's size."""
        clauses, args = _scope(project, agent)
        clauses = f"{clauses} AND" if clauses else "WHERE"
        # ``archived`` is always 0 or 1 (the fold's flag): compared as is, the index serves it.
        clauses += f" archived = {int(archived)}"
        where = f"{clauses} AND"
        with self._read_lock:
            db = self._reader
            named: set[str] = set()
            for (children,) in db.execute(
                # The parents alone, through their partial index (the planner, without
                # statistics, would rather walk every row of the flag).
                f"SELECT children FROM sessions INDEXED BY sessions_parents {where} "
                "children != '[]'",
                args,
            ):
                named.update(json.loads(children))
            tops: list[tuple[Any, ...]] = []
            for row in db.execute(
                f"SELECT {_LISTED} FROM sessions {clauses} ORDER BY active DESC, id DESC", args
            ):
                if row[1] not in named:
                    tops.append(row)
                    if len(tops) >= limit:
                        break
            (total,) = db.execute(f"SELECT COUNT(*) FROM sessions {clauses}", args).fetchone()
            (children_total,) = db.execute(
                f"SELECT COUNT(*) FROM sessions INDEXED BY sessions_id {where} id IN "
                "(SELECT value FROM json_each(?))",
                [*args, json.dumps(sorted(named))],
            ).fetchone()
            rows, level = list(tops), tops
            for _depth in range(8):
                wanted = sorted({c for r in level for c in json.loads(r[17] or "[]")})
                if not wanted:
                    break
                level = db.execute(
                    f"SELECT {_LISTED} FROM sessions INDEXED BY sessions_id {where} id IN "
                    "(SELECT value FROM json_each(?)) ORDER BY active DESC, id DESC",
                    [*args, json.dumps(wanted)],
                ).fetchall()
                rows += level
            files = self._files_of([r[0] for r in rows])
        return [_listed(row, files.get(row[0], [])) for row in rows], total - children_total

    def _files_of(self, skeys: list[str]) -> dict[str, list[tuple[str, bool, bool, int]]]:
        files: dict[str, list[tuple[str, bool, bool, int]]] = {}
        for skey, path, residue, unterm, line in self._reader.execute(
            "SELECT skey, path, residue, unterminated, line FROM files "
            "WHERE skey IN (SELECT value FROM json_each(?)) ORDER BY skey, file",
            (json.dumps(skeys),),
        ):
            files.setdefault(skey, []).append((path, bool(residue), bool(unterm), line))
        return files

    # ------------------------------------------------------------------ search

    def search(
        self,
        query: str,
        *,
        limit: int = 20,
        since: float | None = None,
        workspace: str | None = None,
        project: str | None = None,
        agent: str | None = None,
    ) -> list[Hit]:
        """Sessions matching the FTS5 ``query``, most recently active first, each with its best
        hit; ``QuerySyntaxError`` for a query FTS5 cannot parse.  A session whose run is open
        reads ``running`` while a writer holds its lock, else ``interrupted`` (R-SET-5)."""
        with self._read_lock:
            hits = search(
                self._reader,
                query,
                limit=limit,
                since=since,
                workspace=workspace,
                project=project,
                agent=agent,
            )
        return [_live(h) for h in hits]


def _row(r: tuple[Any, ...]) -> dict[str, Any]:
    row = dict(zip(SESSION_COLUMNS, r, strict=False))
    row["first_prompt"], row["subagent"] = r[-2], bool(r[-1])
    row["archived"] = bool(row["archived"])
    return row


def _prices(prices: Mapping[str, Price] | None) -> Mapping[str, Price]:
    if prices is not None:
        return prices
    from projections import DEFAULT_PRICES

    return DEFAULT_PRICES


def _live(hit: Hit) -> Hit:
    if not hit.open or hit.latest is None:
        return hit
    try:
        held = probe_lock(lock_path_of(Path(hit.latest))).held
    except (OSError, ValueError):
        held = False
    return dataclasses.replace(hit, status="running" if held else "interrupted")


def _listed(row: tuple[Any, ...], files: list[tuple[str, bool, bool, int]]) -> IndexedSession:
    (
        _skey,
        sid,
        project,
        agent,
        created,
        active,
        status,
        is_open,
        records,
        turns,
        title,
        max_turns,
        last_error,
        workspace,
        last_status,
        task_running,
        is_child,
        children,
        diagnostics,
        latest,
        error,
        archived,
    ) = row
    paths = [Path(p) for p, _r, _u, _l in files]
    info = SessionInfo(sid, project, agent, datetime.fromisoformat(created), paths)
    diags = [Diagnostic(Path(p), n, k, d) for p, n, k, d in json.loads(diagnostics or "[]")]
    if files and files[-1][1]:
        diags.append(
            Diagnostic(Path(files[-1][0]), 1, "empty_file", "crash residue (R-ROOT-10): ignored")
        )
    return IndexedSession(
        info=info,
        active=float(active or 0.0),
        latest=Path(latest) if latest else (paths[-1] if paths else Path()),
        status=status,
        open=bool(is_open),
        records=records,
        turns=turns,
        title=title,
        max_turns=bool(max_turns),
        last_error=last_error,
        workspace=workspace or None,
        last_request_status=last_status,
        task_running=bool(task_running),
        is_child=bool(is_child),
        children=list(json.loads(children or "[]")),
        diagnostics=diags,
        error=error,
        unterminated=[(Path(p), n + 1) for p, r, u, n in files if u and not r],
        archived=bool(archived),
    )


def _prefix(project: str | None, agent: str | None) -> str:
    """The start of the session keys of ``project``/``agent`` (``session_key``)."""
    if project is None:
        return ""
    return f"{project}/" if agent is None else f"{project}/{agent}/"


def _scope(project: str | None, agent: str | None) -> tuple[str, list[str]]:
    clauses: list[str] = []
    args: list[str] = []
    if project is not None:
        clauses.append("project = ?")
        args.append(project)
    if agent is not None:
        clauses.append("agent = ?")
        args.append(agent)
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", args


def _window(start: str | None, end: str | None, session: str | None) -> tuple[str, list[str]]:
    clauses: list[str] = []
    args: list[str] = []
    if start:
        clauses.append("time >= ?")
        args.append(start)
    if end:
        clauses.append("time < ?")
        args.append(end)
    if session:
        clauses.append("session = ?")
        args.append(session)
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", args
