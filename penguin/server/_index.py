"""The SQLite index: a catch-up projection of the traces (R-SRV-10, R-SRV-13).

Owns: ``<home>/index.sqlite3`` (WAL): session rows, usage rows (one per ``token_usage``) and
error rows (one per failed ``request_end``), and a checkpoint per trace file (path, byte offset,
mtime).  A refresh walks the root; a session any of whose files moved past its checkpoint is
folded again from its files and its rows replaced in one transaction, so the rows are a pure
function of the traces: deleting the database and refreshing gives the same rows.  Does not:
hold any truth of its own, or know what is running (the host overlays live state).
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any, Final

from eventstore import (
    CompactionBeginPayload,
    CompactionEndPayload,
    DataRoot,
    OmniMessage,
    RequestEndPayload,
    SessionInfo,
    SessionMetaPayload,
    TokenUsagePayload,
    UnknownPayload,
    file_index,
    tail,
    unrecognised,
)
from projections import SessionState

__all__ = ["Index"]

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, session TEXT NOT NULL,
    offset INTEGER NOT NULL, mtime_ns INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, project TEXT, agent TEXT,
    created TEXT, files INTEGER, records INTEGER, turns INTEGER, last_status TEXT,
    model TEXT, workspace TEXT, tokens INTEGER, last_active TEXT, status TEXT,
    approval TEXT, runs INTEGER, unreadable INTEGER);
CREATE TABLE IF NOT EXISTS usage (session TEXT, agent TEXT, model TEXT, kind TEXT,
    cache_read INTEGER, cache_write INTEGER, output INTEGER, total INTEGER, time TEXT,
    file INTEGER, ordinal INTEGER);
CREATE TABLE IF NOT EXISTS errors (session TEXT, status TEXT, message TEXT, time TEXT,
    file INTEGER, ordinal INTEGER);
CREATE INDEX IF NOT EXISTS usage_session ON usage(session);
CREATE INDEX IF NOT EXISTS usage_time ON usage(time);
CREATE INDEX IF NOT EXISTS errors_session ON errors(session);
"""

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
]

# Bumped whenever a table changes shape: an index of another shape is dropped and rebuilt from
# the traces (it is a projection, R-SRV-13).
_SCHEMA_VERSION: Final = 3


class Index:
    """Thread-safe; every method is blocking (call through ``anyio.to_thread``)."""

    def __init__(self, root: DataRoot, path: Path | None = None) -> None:
        self.root = root
        self.path = path or root.home / "index.sqlite3"
        root.ensure_dir(self.path.parent)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        (version,) = self._db.execute("PRAGMA user_version").fetchone()
        if version != _SCHEMA_VERSION:
            for table in ("files", "sessions", "usage", "errors"):
                self._db.execute(f"DROP TABLE IF EXISTS {table}")
            self._db.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
        self._db.executescript(_SCHEMA)
        self._refreshing = threading.Lock()
        # Each session's fold so far (in memory only: a restart folds the files again).
        self._folds: dict[str, _Fold] = {}

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------------ catch-up

    def refresh(self) -> list[str]:
        """Fold what changed since the checkpoints; returns the ids whose rows changed."""
        with self._refreshing:
            infos = self.root.sessions()
            with self._lock:
                known: dict[str, dict[str, tuple[int, int]]] = {}
                for path, sid, offset, mtime in self._db.execute(
                    "SELECT path, session, offset, mtime_ns FROM files"
                ):
                    known.setdefault(sid, {})[path] = (offset, mtime)
            changed: list[SessionInfo] = []
            seen: set[str] = set()
            for info in infos:
                seen.add(info.session_id)
                now = {str(f): _stat(f)[:2] for f in info.files}
                if now != known.get(info.session_id):
                    changed.append(info)
            for info in changed:
                self._catch_up(info)
            gone = self._gone(seen)
            for sid in gone:
                self._folds.pop(sid, None)
            return [i.session_id for i in changed] + gone

    def _gone(self, seen: set[str]) -> list[str]:
        with self._lock:
            ids = [r[0] for r in self._db.execute("SELECT id FROM sessions")]
            gone = [i for i in ids if i not in seen]
            for sid in gone:
                self._delete_locked(sid)
        return gone

    def _delete_locked(self, sid: str) -> None:
        db = self._db
        for table, col in (
            ("sessions", "id"),
            ("usage", "session"),
            ("errors", "session"),
            ("files", "session"),
        ):
            db.execute(f"DELETE FROM {table} WHERE {col} = ?", (sid,))

    def _catch_up(self, info: SessionInfo) -> None:
        """Fold only the lines appended since the last refresh when the session's files merely
        grew (the common case while a task runs: a full refold each time would make a long
        task's index cost quadratic); fold every file again otherwise."""
        fold = self._folds.get(info.session_id)
        whole = fold is None or not fold.continues(info.files)
        if whole:
            fold = self._folds[info.session_id] = _Fold(info.session_id, info.agent)
        assert fold is not None
        usage, errors = fold.advance(info.files)
        row = (
            info.session_id,
            info.project,
            info.agent,
            info.created.isoformat(),
            len(info.files),
            fold.state.records,
            fold.state.turns_total,
            fold.state.last_request_status,
            fold.model,
            fold.workspace,
            fold.state.session_tokens.total,
            fold.last_time,
            # R-SET-5: as the records say; a run left open is "interrupted" here, and the
            # reader asks the lock whether it is running instead.
            fold.state.status,
            fold.state.settings.approval if fold.state.settings is not None else None,
            fold.state.runs,
            fold.unreadable,
        )
        with self._lock:
            db = self._db
            db.execute("BEGIN")
            try:
                if whole:
                    self._delete_locked(info.session_id)
                else:
                    db.execute("DELETE FROM sessions WHERE id = ?", (info.session_id,))
                db.execute(f"INSERT INTO sessions VALUES ({','.join('?' * len(row))})", row)
                db.executemany("INSERT INTO usage VALUES (?,?,?,?,?,?,?,?,?,?,?)", usage)
                db.executemany("INSERT INTO errors VALUES (?,?,?,?,?,?)", errors)
                db.executemany(
                    "INSERT OR REPLACE INTO files VALUES (?,?,?,?)",
                    [
                        (p, info.session_id, size, mt)
                        for p, (size, mt, _ino) in fold.stats.items()
                        if size >= 0
                    ],
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                self._folds.pop(info.session_id, None)
                raise

    # ------------------------------------------------------------------ queries

    def session_rows(self) -> list[dict[str, Any]]:
        with self._lock:
            cur = self._db.execute(
                f"SELECT {', '.join(SESSION_COLUMNS)} FROM sessions ORDER BY created DESC, id DESC"
            )
            return [dict(zip(SESSION_COLUMNS, r, strict=True)) for r in cur]

    def session_row(self, sid: str) -> dict[str, Any] | None:
        with self._lock:
            r = self._db.execute(
                f"SELECT {', '.join(SESSION_COLUMNS)} FROM sessions WHERE id = ?", (sid,)
            ).fetchone()
        return None if r is None else dict(zip(SESSION_COLUMNS, r, strict=True))

    def usage(
        self, *, start: str | None, end: str | None, group_by: str, session: str | None
    ) -> list[dict[str, Any]]:
        key = {
            "session": "session",
            "model": "model",
            "day": "substr(time, 1, 10)",
            "hour": "substr(time, 1, 13)",
        }[group_by]
        where, args = _window(start, end, session)
        sql = (
            f"SELECT {key} AS k, COUNT(*), SUM(cache_read), SUM(cache_write), SUM(output), "
            f"SUM(total) FROM usage {where} GROUP BY k ORDER BY k"
        )
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [
            {"key": k, "requests": n, "cache_read": a, "cache_write": b, "output": c, "total": t}
            for k, n, a, b, c, t in rows
        ]

    def usage_rows(self) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(
                "SELECT * FROM usage ORDER BY session, file, ordinal"
            ).fetchall()

    def errors(
        self, *, start: str | None, end: str | None, session: str | None
    ) -> list[dict[str, Any]]:
        where, args = _window(start, end, session)
        with self._lock:
            rows = self._db.execute(
                f"SELECT session, status, message, time FROM errors {where} ORDER BY time", args
            ).fetchall()
        return [{"session": s, "status": st, "message": m, "time": t} for s, st, m, t in rows]


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


def _stat(path: Path) -> tuple[int, int, int]:
    """Size, mtime and inode (``(-1, -1, -1)`` for a file that vanished)."""
    try:
        st = path.stat()
    except OSError:
        return -1, -1, -1
    return st.st_size, st.st_mtime_ns, st.st_ino


def _file_index(path: Path) -> int:
    return file_index(path) or 0


class _Fold:
    """One session's rows as a fold over its files' complete lines, resumable at the byte
    offset where it stopped (``eventstore.tail``: the reader's line rules; an unterminated last
    line waits for its newline)."""

    def __init__(self, session_id: str, agent: str) -> None:
        self.session_id = session_id
        self.agent = agent
        self.state = SessionState()
        self.model = ""
        self.workspace = ""
        self.last_time = ""
        self.stats: dict[str, tuple[int, int, int]] = {}
        self._done: dict[str, int] = {}  # path -> bytes folded (whole lines)
        self._ordinal: dict[str, int] = {}  # path -> records folded
        self._compacting: dict[str, bool] = {}
        self.unreadable = 0

    def continues(self, files: list[Path]) -> bool:
        """Whether ``files`` are the folded files, grown (and maybe followed by new ones)."""
        paths = [str(f) for f in files]
        folded = list(self._done)
        if paths[: len(folded)] != folded:
            return False
        for path in folded:
            size, _mtime, ino = _stat(Path(path))
            if size < self._done[path] or ino != self.stats[path][2]:
                return False
        return True

    def advance(self, files: list[Path]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """Fold what was appended; returns the new usage and error rows."""
        usage: list[tuple[Any, ...]] = []
        errors: list[tuple[Any, ...]] = []
        for f in files:
            path = str(f)
            st = self.stats[path] = _stat(f)  # before reading: a later append shows as a change
            if st[0] < 0:
                continue
            index = _file_index(f)
            start = self._done.get(path, 0)
            ordinal = self._ordinal.get(path, 0)
            compacting = self._compacting.get(path, False)
            end, records = _complete_records(f, start)
            for rec in records:
                compacting = self._apply(rec, index, ordinal, compacting, usage, errors)
                ordinal += 1
            self._done[path], self._ordinal[path] = end, ordinal
            self._compacting[path] = compacting
        return usage, errors

    def _apply(
        self,
        rec: OmniMessage,
        index: int,
        ordinal: int,
        compacting: bool,
        usage: list[tuple[Any, ...]],
        errors: list[tuple[Any, ...]],
    ) -> bool:
        self.state.apply(rec)
        p = rec.payload
        self.last_time = rec.timestamp
        if isinstance(p, UnknownPayload):
            found = unrecognised(rec)
            self.unreadable += found is not None and found.damaged
        elif isinstance(p, SessionMetaPayload):
            self.model, self.workspace = p.model_id, p.workspace
        elif isinstance(p, CompactionBeginPayload):
            return True
        elif isinstance(p, CompactionEndPayload):
            return False
        elif isinstance(p, TokenUsagePayload):
            r = p.request
            kind = "compaction" if compacting else "turn"
            usage.append(
                (
                    self.session_id,
                    self.agent,
                    self.model,
                    kind,
                    r.cache_read,
                    r.cache_write,
                    r.output,
                    r.total,
                    rec.timestamp,
                    index,
                    ordinal,
                )
            )
        elif isinstance(p, RequestEndPayload) and p.status not in ("completed", "aborted"):
            errors.append(
                (self.session_id, p.status, p.error_message or "", rec.timestamp, index, ordinal)
            )
        return compacting


def _complete_records(path: Path, start: int) -> tuple[int, list[OmniMessage]]:
    """The records of the complete lines from byte ``start`` on, and the offset after them
    (``eventstore.tail``: the reader's rules)."""
    try:
        read = tail(path, start)
    except OSError:
        return start, []  # a vanished file folds nothing
    return read.offset, [t.record for t in read.records]
