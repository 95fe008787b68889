"""Catching the index up with the traces, by byte offsets.

Owns: deciding, per session, whether its files only grew since their checkpoints (then the
fold continues from each file's offset, ordinal and line with the store's positioned read,
``eventstore.tail``) or were truncated, replaced (another inode), written again (the same size
with another mtime or ctime, or other bytes at the start or just before the checkpoint: its hash),
deleted or reordered (then the session is folded again from its files); skipping
crash residue (R-ROOT-10: a file without a ``session_meta``, or past the
first holding nothing but its rotation head — never folded, read again when it grows); and
writing the session's rows in one ``BEGIN IMMEDIATE`` transaction, inside which the checkpoints
are read, so two processes never fold the same bytes twice.  Does not: decide what a record
adds (``_fold``) or answer queries (``_index``).
"""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import msgspec

from eventstore import SessionInfo, TailRecord, file_index, tail

from ._checkpoint import Checkpoint, Stat, head_hash, session_key, stat
from ._fold import Doc, SessionFold, fold_shape, is_head

__all__ = ["catch_up", "check_shape", "delete_session"]


def check_shape(db: sqlite3.Connection) -> None:
    """Empty the index when its encoded folds were written by another shape of the session
    state (a newer or older version): they cannot be continued, so everything is folded again.
    Runs its own transaction."""
    want = fold_shape()
    db.execute("BEGIN IMMEDIATE")
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'fold'").fetchone()
        if row is None or row[0] != want:
            for table in ("fts", "docs", "usage", "errors", "files", "sessions"):
                db.execute(f"DELETE FROM {table}")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('fold', ?)", (want,))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def delete_session(db: sqlite3.Connection, skey: str) -> None:
    """Remove every row of the session (inside the caller's transaction)."""
    # By rowid, one at a time: FTS5 answers ``rowid IN (subquery)`` by scanning the whole
    # table, which made a cold build quadratic.
    rowids = db.execute("SELECT rowid FROM docs WHERE skey = ?", (skey,)).fetchall()
    if rowids:
        db.executemany("DELETE FROM fts WHERE rowid = ?", rowids)
    for table in ("docs", "usage", "errors", "files", "sessions"):
        db.execute(f"DELETE FROM {table} WHERE skey = ?", (skey,))


def _checkpoints(db: sqlite3.Connection, skey: str) -> dict[str, Checkpoint]:
    out: dict[str, Checkpoint] = {}
    for row in db.execute(
        "SELECT path, file, size, mtime_ns, inode, offset, ordinal, line, head, residue, "
        "unterminated, ctime_ns FROM files WHERE skey = ?",
        (skey,),
    ):
        path, file, size, mtime, ino, offset, ordinal, line, head, residue, unterm, ctime = row
        out[path] = Checkpoint(
            file,
            Stat(size, mtime, ino, ctime),
            offset,
            ordinal,
            line,
            head,
            bool(residue),
            bool(unterm),
        )
    return out


def _continues(
    info: SessionInfo, known: dict[str, Checkpoint], stats: dict[str, Stat | None]
) -> bool:
    """Whether the checkpointed files are the session's first files, each only grown."""
    paths = [str(f) for f in info.files]
    if not known or paths[: len(known)] != sorted(known, key=lambda p: known[p].file):
        return False
    for path, cp in known.items():
        st = stats[path]
        if st is None or st.inode != cp.stat.inode or st.size < cp.offset:
            return False  # deleted, replaced or truncated
        if st.size == cp.stat.size and st != cp.stat:
            # Written again in place (the mtime, or the ctime that no one can set back): an
            # append grows a file.
            return False
        if st != cp.stat and not cp.residue and head_hash(Path(path), cp.offset) != cp.head:
            return False  # rewritten in place
    return True


#: A batch of sessions caught up in one transaction ends after this long: a commit costs
#: more than a small session's fold, and the other writer waits at most this for the lock.
BATCH_SECONDS: Final = 0.5


def catch_up(db: sqlite3.Connection, infos: list[SessionInfo]) -> list[str]:
    """Bring the sessions' rows up to their files; returns the ids whose rows changed.  Runs
    its own ``BEGIN IMMEDIATE`` transactions (the caller holds none), one per batch of
    sessions; the checkpoints are read inside them, so a concurrent writer's work is seen."""
    changed: list[str] = []
    pending = list(infos)
    while pending:
        db.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        done: list[str] = []
        try:
            while pending and time.monotonic() - started < BATCH_SECONDS:
                info = pending.pop(0)
                skey = session_key(info.project, info.agent, info.session_id)
                if _catch_up_locked(db, info, skey):
                    done.append(info.session_id)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        changed += done
    return changed


def _catch_up_locked(db: sqlite3.Connection, info: SessionInfo, skey: str) -> bool:
    known = _checkpoints(db, skey)
    stats = {str(f): stat(f) for f in info.files}
    if len(known) == len(stats) and all(
        (cp := known.get(p)) is not None and st == cp.stat for p, st in stats.items()
    ):
        return False  # another process caught it up while this one waited for the lock
    fold: SessionFold | None = None
    if _continues(info, known, stats):
        row = db.execute("SELECT fold FROM sessions WHERE skey = ?", (skey,)).fetchone()
        if row is not None and row[0] is not None:
            try:
                fold = SessionFold.decode(row[0], info.session_id, info.project, info.agent)
            except msgspec.DecodeError:
                fold = None
    if fold is None:
        delete_session(db, skey)
        known = {}
        fold = SessionFold(info.session_id, info.project, info.agent)
    usage: list[tuple[Any, ...]] = []
    errors: list[tuple[Any, ...]] = []
    docs: list[Doc] = []
    checkpoints: list[tuple[Any, ...]] = []
    error: str | None = None
    for position, f in enumerate(info.files, start=1):
        path = str(f)
        st = stats[path]
        index = file_index(f) or position
        cp = known.get(path)
        if st is None:
            error = f"{path}: vanished while indexing"
            continue
        if cp is not None and not cp.residue and st == cp.stat:
            checkpoints.append(_row(skey, path, index, st, cp))
            continue
        if cp is None or cp.residue:
            cp = Checkpoint(index, st, 0, 0, 0, b"", True, False)
        try:
            read = tail(f, cp.offset, ordinal=cp.ordinal, line=cp.line)
        except OSError as exc:
            error = f"{path}: {exc.strerror or exc}"
            checkpoints.append(_row(skey, path, index, Stat(-1, -1, -1, -1), cp))
            continue
        records = read.records
        if cp.residue and not _settled(records, index):
            # Crash residue (or a rotation's head not followed by anything yet): not folded;
            # read again from the start when it grows.
            cp.stat, cp.unterminated = st, read.unterminated
            checkpoints.append(_row(skey, path, index, st, cp))
            continue
        for d in read.diagnostics:
            fold.diagnose(path, d.line, d.kind, d.detail)
        for t in records:
            _apply(fold, t, path, usage, errors, docs)
        done = Checkpoint(
            index,
            st,
            read.offset,
            read.ordinal,
            read.line,
            head_hash(f, read.offset),
            False,
            read.unterminated,
        )
        checkpoints.append(_row(skey, path, index, st, done))
    _write(db, info, skey, fold, checkpoints, usage, errors, docs, error)
    return True


def _settled(records: list[TailRecord], index: int) -> bool:
    """Not crash residue: a ``session_meta`` and (past the first file) a record beyond the
    rotation head (R-ROOT-10)."""
    meta = any(t.record.type == "session_meta" for t in records)
    return meta and (index == 1 or any(not is_head(t.record) for t in records))


def _apply(
    fold: SessionFold,
    t: TailRecord,
    path: str,
    usage: list[tuple[Any, ...]],
    errors: list[tuple[Any, ...]],
    docs: list[Doc],
) -> None:
    fold.apply(
        t.record,
        path=path,
        line=t.line,
        file=t.file,
        ordinal=t.ordinal,
        usage=usage,
        errors=errors,
        docs=docs,
    )


def _row(skey: str, path: str, index: int, st: Stat, cp: Checkpoint) -> tuple[Any, ...]:
    return (
        path,
        skey,
        index,
        st.size,
        st.mtime_ns,
        st.inode,
        cp.offset,
        cp.ordinal,
        cp.line,
        cp.head,
        int(cp.residue),
        int(cp.unterminated),
        st.ctime_ns,
    )


def _epoch(timestamp: str) -> float | None:
    try:
        when = datetime.fromisoformat(timestamp)
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _write(
    db: sqlite3.Connection,
    info: SessionInfo,
    skey: str,
    fold: SessionFold,
    checkpoints: list[tuple[Any, ...]],
    usage: list[tuple[Any, ...]],
    errors: list[tuple[Any, ...]],
    docs: list[Doc],
    error: str | None,
) -> None:
    used = [c for c in checkpoints if not c[10]]
    latest = used[-1] if used else checkpoints[-1] if checkpoints else None
    s, st = fold.summary, fold.state
    active = _epoch(s.last_time) if s.last_time else None
    if active is None:
        active = (latest[4] / 1e9) if latest is not None and latest[4] > 0 else 0.0
    row = (
        skey,
        info.session_id,
        info.project,
        info.agent,
        info.created.isoformat(),
        len(info.files),
        st.records,
        st.turns_total,
        st.last_request_status,
        s.model,
        s.workspace,
        st.session_tokens.total,
        s.last_time,
        active,
        # R-SET-5: as the records say; a run left open reads "interrupted" here, and a reader
        # asks the lock whether it is running instead.
        "unreadable" if error is not None else st.status,
        int(st.run_open),
        int(st.task_running),
        st.settings.approval if st.settings is not None else None,
        st.runs,
        s.unreadable,
        fold.title,
        int(s.is_child),
        json.dumps(s.children),
        int(s.max_turns),
        s.last_error,
        json.dumps(s.diagnostics),
        None if latest is None else latest[0],
        error,
        int(s.archived),
        fold.encode(),
    )
    db.execute(f"INSERT OR REPLACE INTO sessions VALUES ({','.join('?' * len(row))})", row)
    db.executemany("INSERT OR REPLACE INTO files VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", checkpoints)
    # The checkpoints of files the session no longer has (a fold from the start).
    db.execute(
        f"DELETE FROM files WHERE skey = ? AND path NOT IN ({','.join('?' * len(checkpoints))})",
        (skey, *(c[0] for c in checkpoints)),
    )
    db.executemany(
        "INSERT INTO usage VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", [(skey, *u) for u in usage]
    )
    db.executemany("INSERT INTO errors VALUES (?,?,?,?,?,?,?,?,?)", [(skey, *e) for e in errors])
    if docs:
        # Numbered here (the write lock is held): two batched inserts instead of two per text.
        (last,) = db.execute("SELECT coalesce(max(rowid), 0) FROM docs").fetchone()
        first = last + 1
        db.executemany(
            "INSERT INTO docs (rowid, skey, kind, file, ordinal, time) VALUES (?,?,?,?,?,?)",
            [(first + n, skey, k, f, o, w) for n, (k, _b, f, o, w) in enumerate(docs)],
        )
        db.executemany(
            "INSERT INTO fts (rowid, body) VALUES (?, ?)",
            [(first + n, d[1]) for n, d in enumerate(docs)],
        )
