"""The index database: its tables, its version, and how a connection is opened.

Owns: the DDL of ``<home>/index.sqlite3`` — ``files`` (a checkpoint per trace file: the byte
offset, ordinal and line folded so far, and the size, mtime, inode, ctime and hash that say
whether the file only grew), ``sessions`` (one row per session, with its encoded fold),
``usage``, ``errors``, ``docs`` + ``fts`` (the FTS5 full-text index) — and opening a
connection in WAL mode with a busy timeout, so a CLI and a server can write at once.  An index
of another version is dropped and rebuilt:
it is a projection of the traces (and so is an index whose encoded folds another shape of the
session state wrote: ``_catchup.check_shape``).  Imports nothing of the library layers, so a
listing with nothing to fold loads none of them.  Does not: fold (``_fold``) or catch up (``_catchup``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Final

__all__ = ["BUSY_TIMEOUT_MS", "connect", "fts5_available"]

#: How long a writer waits for another process's transaction (each is one session's catch-up).
BUSY_TIMEOUT_MS: Final = 30_000

# 2 and 3 were the server's own index; 4 the shared one; 5 checkpoints a file's ctime too;
# 6 adds ``sessions.archived``; 7 and 8 index what a listing of the latest sessions reads (the
# parents; the rows by archived flag and activity), so it reads those alone.
_VERSION: Final = 8

_TABLES: Final = ("meta", "files", "sessions", "usage", "errors", "docs", "fts")

_DDL: Final = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, skey TEXT NOT NULL,
    file INTEGER NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    inode INTEGER NOT NULL, offset INTEGER NOT NULL, ordinal INTEGER NOT NULL,
    line INTEGER NOT NULL, head BLOB NOT NULL, residue INTEGER NOT NULL,
    unterminated INTEGER NOT NULL, ctime_ns INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS files_skey ON files(skey);
CREATE TABLE IF NOT EXISTS sessions (skey TEXT PRIMARY KEY, id TEXT NOT NULL, project TEXT,
    agent TEXT, created TEXT, files INTEGER, records INTEGER, turns INTEGER,
    last_status TEXT, model TEXT, workspace TEXT, tokens INTEGER, last_active TEXT,
    active REAL, status TEXT, open INTEGER, task_running INTEGER, approval TEXT,
    runs INTEGER, unreadable INTEGER, title TEXT, is_child INTEGER, children TEXT, max_turns INTEGER,
    last_error TEXT, diagnostics TEXT, latest TEXT, error TEXT, archived INTEGER, fold BLOB);
CREATE INDEX IF NOT EXISTS sessions_id ON sessions(id);
CREATE INDEX IF NOT EXISTS sessions_active ON sessions(active, id);
CREATE INDEX IF NOT EXISTS sessions_parents ON sessions(children, archived, project, agent)
    WHERE children != '[]';
CREATE INDEX IF NOT EXISTS sessions_listing ON sessions(archived, active, id, project, agent);
CREATE TABLE IF NOT EXISTS usage (skey TEXT NOT NULL, session TEXT, project TEXT, agent TEXT,
    model TEXT, kind TEXT, cache_read INTEGER, cache_write INTEGER, output INTEGER,
    total INTEGER, time TEXT, file INTEGER, ordinal INTEGER);
CREATE INDEX IF NOT EXISTS usage_skey ON usage(skey);
CREATE INDEX IF NOT EXISTS usage_time ON usage(time);
CREATE TABLE IF NOT EXISTS errors (skey TEXT NOT NULL, session TEXT, project TEXT,
    agent TEXT, status TEXT, message TEXT, time TEXT, file INTEGER, ordinal INTEGER);
CREATE INDEX IF NOT EXISTS errors_skey ON errors(skey);
CREATE TABLE IF NOT EXISTS docs (rowid INTEGER PRIMARY KEY, skey TEXT NOT NULL,
    kind TEXT NOT NULL, file INTEGER NOT NULL, ordinal INTEGER NOT NULL, time TEXT);
CREATE INDEX IF NOT EXISTS docs_skey ON docs(skey);
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(body,
    tokenize = 'unicode61 remove_diacritics 2');
"""


def fts5_available() -> bool:
    try:
        sqlite3.connect(":memory:").execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    except sqlite3.OperationalError:
        return False
    return True


def connect(path: Path | None) -> sqlite3.Connection:
    """A connection to the index at ``path`` (None: in memory), its tables of this version.

    Autocommit mode: every write is an explicit ``BEGIN IMMEDIATE`` … ``COMMIT`` (the write
    lock is taken before the checkpoints are read, so two writers never fold the same bytes)."""
    db = sqlite3.connect(
        ":memory:" if path is None else path,
        isolation_level=None,
        check_same_thread=False,
        timeout=BUSY_TIMEOUT_MS / 1000,
    )
    try:
        db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        if path is not None:
            db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        # Searches read the FTS5 segments at random: a larger page cache and memory-mapped
        # reads keep a warm query off the read() path on a large index.
        db.execute("PRAGMA cache_size=-32768")
        if path is not None:
            db.execute(f"PRAGMA mmap_size={256 * 2**20}")
        _migrate(db)
    except BaseException:
        db.close()
        raise
    return db


def _migrate(db: sqlite3.Connection) -> None:
    """Drop an index of another version and create the tables (one transaction:
    two processes opening a fresh index at once create it once)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        (version,) = db.execute("PRAGMA user_version").fetchone()
        if version != _VERSION:
            names = [
                r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            ]
            for name in ("fts", *(n for n in names if n in _TABLES)):
                db.execute(f'DROP TABLE IF EXISTS "{name}"')
            for statement in _DDL.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version={_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
