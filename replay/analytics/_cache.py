"""The incremental Parquet cache of the analytics views, under a data root.

Owns: ``<home>/.cache/analytics-v1/`` -- a manifest (JSON: the root's listing, ``_scan``, each
session's generation, each file's cursor) and Parquet segments in two
layers: ``lines`` (each trace file's classified lines, the ``_cls`` rows of ``_load``, appended
by byte offsets read with ``eventstore.tail``) and one per public view (each session's rows,
rebuilt from ``lines`` when one of its files changed) -- the refresh that brings them up to
date with the files, and the views of a cached fleet over the segments.  Does not: list the
root or say which files changed (``_scan``), decide a line or fold a record: the SQL of
``_load`` and ``_views`` does, exactly as without the cache.

The cache is a projection, never a source of truth: deleting the directory loses nothing
(the next query rebuilds it), and a file that shrank, was replaced (another inode, or the
bytes before the cursor differ) or disappeared is read again from its start or dropped.  A
session's view rows are valid while every one of its files has the size, modification time
and inode recorded when they were computed (``_scan`` says which may have changed); a file's
classified lines while its inode is the same and the last bytes before its cursor are
unchanged.  An archived file (on object storage, ``eventstore.archive``) is immutable: its
cached lines stay valid while its record's size and mtime are those of the cursor, so a query
fetches it back only when it was never read whole.  Rows are tagged with a generation
(``gen``): a file or session read again gets a new one, and only the manifest's generations
are read, so segments that a concurrent refresh wrote are never counted twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

import msgspec

from eventstore import parse_trace_name, tail, write_private
from eventstore.archive import fetch_missing

from ._load import classify_files, classify_slices, decide, prepare, records_and_diagnostics
from ._scan import ARCHIVED, Dir, Key, Scan, scan_root
from ._sources import TraceFile
from ._views import VIEWS, create_views, store_fold

if TYPE_CHECKING:
    import duckdb

__all__ = ["CacheInfo", "Refresh", "cache_dir", "cached_views", "plan_refresh"]

_DIR: Final = ("analytics-v1",)
_LINES: Final = "lines"
_LAYERS: Final = (_LINES, *VIEWS)
# A layer with more segments than this is rewritten into one (dead generations dropped).
_MAX_SEGMENTS: Final = 8
# The view layers are rewritten too once this many sessions' rows are superseded in them.
_MAX_SUPERSEDED: Final = 1000
# A segment a compaction replaced is deleted this much later: a query that opened the old
# manifest may still be reading it.
_RETIRE_S: Final = 600.0
# How many bytes before a file's cursor must be unchanged for its cached lines to stay valid.
_CHECK_BYTES: Final = 256

_VERSION: Final = 3


class _File(msgspec.Struct, array_like=True):
    """A file's cursor: its lines up to ``line`` (bytes up to ``offset``) are cached with
    generation ``gen``; ``ino``, ``mtime_ns`` and ``check`` (a hash of the bytes before the
    offset) say whether they still are."""

    gen: int
    offset: int
    ordinal: int
    line: int
    ino: int
    check: str
    mtime_ns: int = 0


def _no_cursors() -> msgspec.Raw:
    return msgspec.Raw(b"{}")


class _Manifest(msgspec.Struct):
    version: int = _VERSION
    max_line_bytes: int = 0
    next_gen: int = 1
    #: ``{path: _File}``, decoded only by a refresh that reads files (a warm query needs none).
    files: msgspec.Raw = msgspec.field(default_factory=_no_cursors)
    #: Each session's generation: its rows in the view segments.
    sessions: dict[str, int] = {}
    #: The root's listing the sessions' rows were computed from (``_scan``).
    dirs: dict[str, Dir] = {}
    #: Generations whose rows the view segments still hold but no session has any more (it was
    #: folded again, or is gone): left out by the views until a compaction drops them.
    superseded: list[int] = []
    segments: dict[str, list[str]] = {}
    retired: dict[str, float] = {}

    def gen(self) -> int:
        self.next_gen += 1
        return self.next_gen - 1


@dataclass(frozen=True, slots=True)
class CacheInfo:
    """What a refresh did: where the cache is, how many sessions' rows it rebuilt, how many
    files it read and how many bytes of them (appended bytes only, for a grown file)."""

    path: Path
    sessions_rebuilt: int
    files_read: int
    bytes_read: int
    #: The segment files the views read.
    segments: tuple[str, ...] = ()


def cache_dir(home: str | os.PathLike[str]) -> Path:
    """The cache's directory under the data root ``home``."""
    return Path(home).expanduser().absolute() / ".cache" / _DIR[0]


def _load_manifest(directory: Path, max_line_bytes: int) -> _Manifest:
    try:
        m = msgspec.json.decode((directory / "manifest.json").read_bytes(), type=_Manifest)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return _Manifest(max_line_bytes=max_line_bytes)
    segments_there = all((directory / s).is_file() for segs in m.segments.values() for s in segs)
    if m.version != _VERSION or m.max_line_bytes != max_line_bytes or not segments_there:
        return _Manifest(max_line_bytes=max_line_bytes)
    return m


def _tail_hash(path: str, offset: int) -> str:
    """A hash of the bytes just before ``offset``: unchanged while the file only grew."""
    start = max(0, offset - _CHECK_BYTES)
    with open(path, "rb") as fh:
        fh.seek(start)
        data = fh.read(offset - start)
    if len(data) != offset - start:
        return ""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _read(
    path: str, known: _File | None, key: Key, m: _Manifest, max_line_bytes: int
) -> tuple[_File, _File, bytes | None, bytes]:
    """The cursor the read starts from (the old one while the cached lines before it are
    valid, else a new generation at 0), the new cursor, the new complete lines (``None``: the
    whole file is read, from its path), and the bytes after them (an unterminated last line,
    or lines appended meanwhile: classified for this query, never cached)."""
    _name, size, mtime_ns, ino = key
    valid = (
        known is not None
        and known.ino == ino
        and known.offset <= size
        and _tail_hash(path, known.offset) == known.check
    )
    if not valid or known is None:
        # Read from the start: DuckDB reads the file itself (``read_blob``); the cursor is
        # where its complete lines end.
        with open(path, "rb") as fh:
            data = fh.read()
        cut = data.rfind(b"\n") + 1
        start = _File(gen=m.gen(), offset=0, ordinal=0, line=0, ino=ino, check="")
        state = _File(
            gen=start.gen,
            offset=cut,
            ordinal=0,
            line=data.count(b"\n", 0, cut),
            ino=ino,
            check=_tail_hash(path, cut),
            mtime_ns=mtime_ns,
        )
        return start, state, None, b""
    # Only what was appended: ``tail`` from the cursor (complete lines; an unterminated last
    # line is never consumed), then those bytes and the rest.
    read = tail(
        path, known.offset, ordinal=known.ordinal, line=known.line, max_line_bytes=max_line_bytes
    )
    with open(path, "rb") as fh:
        fh.seek(known.offset)
        new = fh.read(read.offset - known.offset)
        rest = fh.read()
    state = _File(
        gen=known.gen,
        offset=read.offset,
        ordinal=read.ordinal,
        line=read.line,
        ino=ino,
        check=_tail_hash(path, read.offset),
        mtime_ns=mtime_ns,
    )
    return known, state, new, rest


@dataclass(frozen=True, slots=True)
class Refresh:
    """A data root's cache before its refresh: its manifest and the root's listing (taken
    before DuckDB is opened: nothing of the cache needs it to know what changed)."""

    directory: Path
    manifest: _Manifest
    scan: Scan


def plan_refresh(home: str | os.PathLike[str], *, max_line_bytes: int) -> Refresh | None:
    """Load the cache's manifest and list the root ``home`` against it; ``None`` when the
    cache cannot be written (a read-only root: the caller reads the files instead)."""
    directory = cache_dir(home)
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return None
    m = _load_manifest(directory, max_line_bytes)
    return Refresh(directory, m, scan_root(home, m.dirs))


def cached_views(
    con: duckdb.DuckDBPyConnection,
    plan: Refresh,
    *,
    show: set[str] | None,
    max_line_bytes: int,
) -> tuple[CacheInfo, dict[str, str], str] | None:
    """Refresh the cache ``plan`` describes, then create the public views over its segments
    for the sessions ``show`` (all when ``None``): returns what the refresh did and each view's
    ``CREATE VIEW`` statement, for the caller to run when a query first names it, and the query
    of the sessions' cached lock-free statuses (``_status.store_status``).  Returns
    ``None``, having created nothing, when the cache cannot be written: the caller builds the
    views from the files instead."""
    directory, m, scan = plan.directory, plan.manifest, plan.scan
    dirty = sorted(sid for sid in scan.present if sid in scan.changed or sid not in m.sessions)
    gone = [sid for sid in m.sessions if sid not in scan.present]
    info = CacheInfo(directory, len(dirty), 0, 0)
    try:
        if dirty or gone or any(layer not in m.segments for layer in _LAYERS):
            info = _rebuild(con, directory, m, scan, dirty, gone, max_line_bytes)
        elif scan.relisted:
            # Nothing to fold again, but a directory was listed again (a lock file came or
            # went, a racy listing settled): recorded, so the next query need not list it.
            # The views stand either way: a cache that cannot be written is still read.
            m.dirs = scan.dirs
            with contextlib.suppress(OSError):
                write_private(directory / "manifest.json", msgspec.json.encode(m))
    except OSError:
        _drop_build_tables(con)
        return None
    pending, statuses = _create_cached_views(con, directory, m, show)
    segments = tuple(str(directory / s) for segs in m.segments.values() for s in segs)
    info = CacheInfo(info.path, info.sessions_rebuilt, info.files_read, info.bytes_read, segments)
    return info, pending, statuses


def _cursors(m: _Manifest) -> dict[str, _File]:
    try:
        return msgspec.json.decode(m.files, type=dict[str, _File])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return {}  # every file is read again from its start


def _archived_cursor(known: _File | None, key: Key) -> bool:
    """Whether the cached lines of an archived file (``key`` from its record) are the whole
    file as archived: then they stand, and the file is not fetched back."""
    return known is not None and known.offset == key[1] and known.mtime_ns == key[2]


def _fetch_back(path: str) -> Key:
    """Fetch an archived file back (its lines are not all cached); its key on disk now."""
    where = Path(path)
    parsed = parse_trace_name(where.name)
    if parsed is not None:
        present = set(os.listdir(where.parent))
        fetch_missing(where.parent, parsed[0], present)
    st = os.stat(path)
    return (where.name, st.st_size, st.st_mtime_ns, st.st_ino)


@dataclass(slots=True)
class _Reads:
    """What ``_read_files`` read: byte slices to classify, files to read whole, cached lines to
    keep and new ones to persist (``(fid, path, gen, line)``), each file's new cursor."""

    slices: list[tuple[int, bytes, int, bool]] = field(default_factory=list)
    whole: list[str] = field(default_factory=list)
    keep: list[tuple[int, str, int, int]] = field(default_factory=list)
    persist: list[tuple[int, str, int, int]] = field(default_factory=list)
    states: dict[str, _File] = field(default_factory=dict)
    read_bytes: int = 0
    files_read: int = 0


def _read_files(
    ordered: list[TraceFile],
    keys: dict[str, Key],
    cursors: dict[str, _File],
    m: _Manifest,
    max_line_bytes: int,
) -> _Reads:
    """Each file of the sessions folded again (``fid`` its place in ``ordered``), read from its
    cursor on, from its start, or not at all (an archived file the cache holds whole)."""
    r = _Reads()
    for fid, f in enumerate(ordered):
        key = keys[f.path]
        known = cursors.get(f.path)
        if key[3] == ARCHIVED:
            if _archived_cursor(known, key):
                assert known is not None
                if known.line:
                    r.keep.append((fid, f.path, known.gen, known.line))
                r.states[f.path] = known
                continue
            key = _fetch_back(f.path)  # ArchiveError when it cannot be: as without the cache
        try:
            start, state, new, rest = _read(f.path, known, key, m, max_line_bytes)
        except FileNotFoundError:
            continue  # gone since the listing: like a file listed and then deleted
        if start.line:
            r.keep.append((fid, f.path, state.gen, start.line))
        if new is None:
            r.whole.append(f.path)
            r.read_bytes += key[1]
        elif new:
            r.slices.append((fid, new, start.line, start.offset == 0))
        if rest:
            r.slices.append((fid, rest, state.line, state.offset == 0))
        if new is None or new:
            r.persist.append((fid, f.path, state.gen, state.line))
        r.read_bytes += len(new or b"") + len(rest)
        r.files_read += 1
        r.states[f.path] = state
    return r


def _rebuild(
    con: duckdb.DuckDBPyConnection,
    directory: Path,
    m: _Manifest,
    scan: Scan,
    dirty: list[str],
    gone: list[str],
    max_line_bytes: int,
) -> CacheInfo:
    keyed = {f.path: (f, key) for f, key in scan.keyed(set(dirty))}
    carried = _archived_statuses(con, directory, m, scan, dirty)
    cursors = _cursors(m)
    ordered = prepare(con, [f for f, _key in keyed.values()], max_line_bytes=max_line_bytes)
    r = _read_files(ordered, {p: k for p, (_f, k) in keyed.items()}, cursors, m, max_line_bytes)
    slices, whole, keep, persist, states = r.slices, r.whole, r.keep, r.persist, r.states
    classify_files(con, whole, max_line_bytes=max_line_bytes)
    classify_slices(con, slices, max_line_bytes=max_line_bytes)
    decide(con)
    written: dict[str, str] = {}
    if persist:
        _table(
            con,
            "_persist",
            ["fid", "path", "gen", "upto"],
            persist,
            ["INTEGER", "VARCHAR", "BIGINT", "BIGINT"],
        )
        written[_LINES] = _copy(
            con,
            directory,
            "SELECT p.path, p.gen, c.* EXCLUDE (fid, line) FROM _cls c "
            "JOIN _persist p USING (fid) WHERE c.line_no <= p.upto",
        )
    if keep and m.segments.get(_LINES):
        _table(
            con,
            "_keep",
            ["fid", "path", "gen", "upto"],
            keep,
            ["INTEGER", "VARCHAR", "BIGINT", "BIGINT"],
        )
        con.execute(
            "INSERT INTO _cls BY NAME SELECT k.fid, NULL::VARCHAR AS line, "
            f"c.* EXCLUDE (path, gen) FROM read_parquet({_list(directory, m.segments[_LINES])}) c "
            "JOIN _keep k ON c.path = k.path AND c.gen = k.gen AND c.line_no <= k.upto"
        )
    records_and_diagnostics(con)
    create_views(con)
    store_fold(con)
    for sid in gone:
        m.superseded.append(m.sessions.pop(sid))
    for sid in dirty:
        if sid in m.sessions:
            m.superseded.append(m.sessions[sid])
        m.sessions[sid] = m.gen()
    _table(
        con,
        "_sgen",
        ["session_id", "gen"],
        [(sid, m.sessions[sid]) for sid in dirty],
        ["VARCHAR", "BIGINT"],
    )
    _table(
        con,
        "_fst",
        ["session_id", "free", "held"],
        _lock_free_statuses(keyed.values(), dirty) + carried,
        ["VARCHAR", "VARCHAR", "VARCHAR"],
    )
    for view in VIEWS:
        rows, join = "v.*", ""
        if view == "sessions":
            # R-SET-5: the status asks the session's lock when a query runs; what is cached is
            # the status either answer gives (``_free``: not held, ``_held``: held).
            rows = "v.* EXCLUDE (status), f.free AS _free, f.held AS _held"
            join = "LEFT JOIN _fst f USING (session_id)"
        written[view] = _copy(
            con,
            directory,
            f"SELECT {rows}, g.gen AS _gen FROM {view} v JOIN _sgen g USING (session_id) {join}",
        )
    _drop_build_tables(con)
    listed = {
        f"{path}/{key[0]}"
        for path, d in scan.dirs.items()
        for keys in d.sessions.values()
        for key in keys
    }
    cursors = {p: s for p, s in cursors.items() if p in listed and p not in states} | states
    m.files = msgspec.Raw(msgspec.json.encode(cursors))
    m.dirs = scan.dirs
    for layer, name in written.items():
        m.segments.setdefault(layer, []).append(name)
    _compact(con, directory, m, cursors)
    write_private(directory / "manifest.json", msgspec.json.encode(m))
    _forget_retired(directory, m)
    return CacheInfo(directory, len(dirty), r.files_read, r.read_bytes)


def _archived_statuses(
    con: duckdb.DuckDBPyConnection, directory: Path, m: _Manifest, scan: Scan, dirty: list[str]
) -> list[tuple[str, str, str]]:
    """The cached statuses of the sessions that changed only by being archived: every file
    has the name, size and mtime it had (archived keys carry no inode), so the fold is the
    same and its statuses are kept rather than fetched back to be folded again."""
    before: dict[str, list[Key]] = {}
    for d in m.dirs.values():
        before.update(d.sessions)
    now: dict[str, list[Key]] = {}
    for d in scan.dirs.values():
        now.update(d.sessions)
    gens = []
    for sid in dirty:
        old, new = before.get(sid), now.get(sid)
        if sid not in m.sessions or old is None or new is None or len(old) != len(new):
            continue
        if any(k[3] == ARCHIVED for k in new) and all(
            a[:3] == b[:3] for a, b in zip(old, new, strict=True)
        ):
            gens.append(m.sessions[sid])
    if not gens or not m.segments.get("sessions"):
        return []
    rows = con.execute(
        "SELECT session_id, _free, _held FROM "
        f"read_parquet({_list(directory, m.segments['sessions'])}) "
        f"WHERE _gen IN ({', '.join(str(g) for g in gens)}) AND _free IS NOT NULL"
    ).fetchall()
    return [(str(sid), str(free), str(held)) for sid, free, held in rows]


def _lock_free_statuses(
    keyed: Iterable[tuple[TraceFile, Key]], sessions: list[str]
) -> list[tuple[str, str, str]]:
    """``(session_id, status if its lock is free, status if held)`` of each session whose files
    are all on disk: the fold the status needs (``replay._resume.folded_state``, as
    ``_status``), done once per change instead of on every query that reads ``sessions``.  A
    session with an archived file, or one that cannot be read now, is left out: its status is
    folded when a query asks for it."""
    from replay._resume import folded_state  # here: the engine is loaded only to rebuild

    files: dict[str, list[tuple[int, str]]] = {}
    archived: set[str] = set()
    for f, key in keyed:
        files.setdefault(f.session_id, []).append((f.index, f.path))
        if key[3] == ARCHIVED:
            archived.add(f.session_id)
    out: list[tuple[str, str, str]] = []
    for sid in sessions:
        if sid in archived or sid not in files:
            continue
        try:
            state = folded_state([Path(p) for _i, p in sorted(files[sid])])
        except OSError:
            continue
        out.append((sid, state.status_given(locked=False), state.status_given(locked=True)))
    return out


def _table(
    con: duckdb.DuckDBPyConnection,
    name: str,
    columns: list[str],
    rows: Sequence[tuple[object, ...]],
    types: list[str],
) -> None:
    select = ", ".join(f"unnest(?)::{t} AS {c}" for c, t in zip(columns, types, strict=True))
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM (SELECT {select})",
        [[r[i] for r in rows] or [None] for i in range(len(columns))],
    )
    con.execute(f"DELETE FROM {name} WHERE {columns[0]} IS NULL")


def _quote(path: Path) -> str:
    return "'" + path.as_posix().replace("'", "''") + "'"


def _list(directory: Path, names: list[str]) -> str:
    return "[" + ", ".join(_quote(directory / n) for n in names) + "]"


def _copy(con: duckdb.DuckDBPyConnection, directory: Path, select: str) -> str:
    """Write ``select``'s rows as a new segment; its file name."""
    name = f"{uuid.uuid4().hex}.parquet"
    con.execute(f"COPY ({select}) TO {_quote(directory / name)} (FORMAT parquet)")
    os.chmod(directory / name, 0o600)
    return name


def _compact(
    con: duckdb.DuckDBPyConnection, directory: Path, m: _Manifest, cursors: dict[str, _File]
) -> None:
    """Rewrite a layer of too many segments into one, keeping only live generations.  The
    view layers (which every refresh writes together) are rewritten together, also once too
    many sessions' rows in them are superseded; none are then."""
    views_due = len(m.superseded) > _MAX_SUPERSEDED or any(
        len(m.segments.get(view, [])) > _MAX_SEGMENTS for view in VIEWS
    )
    for layer in _LAYERS:
        segments = m.segments.get(layer, [])
        if len(segments) <= _MAX_SEGMENTS and not (layer != _LINES and views_due):
            continue
        source = f"read_parquet({_list(directory, segments)})"
        if layer == _LINES:
            _table(
                con,
                "_live",
                ["path", "gen", "upto"],
                [(p, s.gen, s.line) for p, s in cursors.items()],
                ["VARCHAR", "BIGINT", "BIGINT"],
            )
            select = (
                f"SELECT c.* FROM {source} c SEMI JOIN _live l "
                "ON c.path = l.path AND c.gen = l.gen AND c.line_no <= l.upto"
            )
        else:
            _table(
                con, "_live", ["session_id", "gen"], list(m.sessions.items()), ["VARCHAR", "BIGINT"]
            )
            select = (
                f"SELECT v.* FROM {source} v SEMI JOIN _live l "
                "ON v.session_id = l.session_id AND v._gen = l.gen"
            )
        name = _copy(con, directory, select)
        con.execute("DROP TABLE _live")
        now = time.time()
        for old in segments:
            m.retired[old] = now
        m.segments[layer] = [name]
    if views_due:
        m.superseded = []


def _forget_retired(directory: Path, m: _Manifest) -> None:
    """Delete segments retired long enough ago, and files no manifest names (a refresh that
    lost a race, or a crash mid-write) once they are as old."""
    now = time.time()
    named = {s for segs in m.segments.values() for s in segs}
    for entry in os.scandir(directory):
        if not entry.name.endswith(".parquet") or entry.name in named:
            continue
        try:
            if now - entry.stat().st_mtime > _RETIRE_S:
                os.unlink(entry.path)
                m.retired.pop(entry.name, None)
        except OSError:
            pass
    m.retired = {k: v for k, v in m.retired.items() if (directory / k).exists()}


def _drop_build_tables(con: duckdb.DuckDBPyConnection) -> None:
    for view in (*VIEWS, "_fold", "_ev"):
        con.execute(f"DROP VIEW IF EXISTS {view}")
    for table in (
        "_fold_stored",
        "_sessions",
        "_records",
        "_diagnostics",
        "_residue",
        "_cls",
        "_files",
        "_persist",
        "_keep",
        "_sgen",
        "_fst",
    ):
        con.execute(f"DROP TABLE IF EXISTS {table}")


def _create_cached_views(
    con: duckdb.DuckDBPyConnection, directory: Path, m: _Manifest, show: set[str] | None
) -> tuple[dict[str, str], str]:
    """Return each public view's statement (binding a view reads its segments' footers: only
    the views a query names are created).  Every session's rows, but superseded ones: left out
    by generation (none after a compaction); for some sessions only (``show``), a ``_live``
    table of theirs, joined.  Also the query of the sessions' cached lock-free statuses
    (``_status``)."""
    if show is None:
        dead = ", ".join(str(gen) for gen in m.superseded)
        keep = f"WHERE v._gen NOT IN ({dead})" if dead else ""
    else:
        live = [(sid, gen) for sid, gen in m.sessions.items() if sid in show]
        _table(con, "_live", ["session_id", "gen"], live, ["VARCHAR", "BIGINT"])
        keep = "SEMI JOIN _live l ON v.session_id = l.session_id AND v._gen = l.gen"
    views: dict[str, str] = {}
    for view in VIEWS:
        if view == "sessions":  # R-SET-5: the status of now, from ``_status`` (the locks asked)
            views[view] = (
                "CREATE OR REPLACE TEMP VIEW sessions AS SELECT v.* EXCLUDE (_gen, _free, _held), "
                f"st.status FROM read_parquet({_list(directory, m.segments[view])}) v "
                f"LEFT JOIN _status st USING (session_id) {keep}"
            )
            continue
        views[view] = (
            f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT v.* EXCLUDE (_gen) "
            f"FROM read_parquet({_list(directory, m.segments[view])}) v {keep}"
        )
    statuses = (
        "SELECT v.session_id, v._free, v._held "
        f"FROM read_parquet({_list(directory, m.segments['sessions'])}) v {keep}"
    )
    return views, statuses
