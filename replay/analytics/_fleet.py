"""``Fleet``: a DuckDB connection with the analytics views over a set of trace files.

Owns: importing DuckDB (lazily, with an install hint when it is missing), choosing the files
(a data root or a glob), running SQL and the named reports, and the Parquet export (one
directory per view, partitioned by day).  Does not: print or format results (the CLI).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from eventstore import MAX_LINE_BYTES

from ._cache import CacheInfo, cached_views, plan_refresh
from ._exceptions import AnalyticsError, AnalyticsUnavailable
from ._load import load
from ._parquet import parquet_views
from ._reports import REPORTS
from ._sources import TraceFile, files_from_glob, files_from_root
from ._status import create_status_table, reads_sessions, store_status
from ._views import FOLD_READERS, VIEWS, create_views, store_fold

if TYPE_CHECKING:
    import duckdb

__all__ = ["Fleet", "Result", "open_fleet"]


@dataclass(frozen=True, slots=True)
class Result:
    """A query's column names and rows (Python values as DuckDB returns them)."""

    columns: list[str]
    rows: list[tuple[Any, ...]]

    def dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


_LISTS_TABLES: Final = re.compile(
    r"\b(show|describe|summarize|information_schema|duckdb_\w+|pragma)\b", re.IGNORECASE
)


def _names(view: str, query: str) -> bool:
    """Whether ``query`` may read ``view``: a column named like it (the reports'
    ``count(...) AS sessions``) is not a read."""
    unaliased = re.sub(rf"\bas\s+{view}\b", " ", query, flags=re.IGNORECASE)
    return re.search(rf"\b{view}\b", unaliased, re.IGNORECASE) is not None


def _duckdb() -> Any:
    try:
        import duckdb
    except ImportError:
        raise AnalyticsUnavailable() from None
    return duckdb


class Fleet:
    """The views ``sessions``, ``records``, ``requests``, ``tool_calls``, ``usage`` and
    ``diagnostics`` over trace files, in an in-memory DuckDB database.  Build one with
    ``open_fleet``; ``connection`` is the DuckDB connection for anything else."""

    def __init__(
        self,
        connection: duckdb.DuckDBPyConnection,
        files: list[TraceFile] | Callable[[], list[TraceFile]],
        *,
        read_only: bool = False,
        cache: CacheInfo | None = None,
    ) -> None:
        self._con = connection
        # Cached views not created yet (``_cache``): each on the first query naming it.
        self._pending: dict[str, str] = {}
        # A cached fleet lists its files only when asked (a warm report needs none of them).
        self._files = files if isinstance(files, list) else None
        self._list_files = files if callable(files) else None
        self.read_only = read_only
        #: What the Parquet cache did, when the views read it (``open_fleet(cache=True)``).
        self.cache = cache
        # The cached views read Parquet: there is no fold to compute.
        self._fold_stored = cache is not None
        self._status_stored = False
        # A cached fleet's query of the sessions' lock-free statuses (``_cache``).
        self._cached_statuses: str | None = None

    @property
    def files(self) -> list[TraceFile]:
        """The trace files the views read (archived ones where they were)."""
        if self._files is None:
            assert self._list_files is not None
            self._files = self._list_files()
        return self._files

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection, every view created."""
        self._create_pending(None)
        return self._con

    def _create_pending(self, query: str | None) -> None:
        """Create the cached views ``query`` names (all of them for ``None`` or a query that
        lists tables): a report on tool calls never binds the other five."""
        if not self._pending:
            return
        every = query is None or _LISTS_TABLES.search(query)
        for view in [v for v in self._pending if every or _names(v, query or "")]:
            self._con.execute(self._pending.pop(view))

    def __enter__(self) -> Fleet:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._con.close()

    @property
    def bytes_read(self) -> int:
        """Total size of the trace files the views were built from."""
        return sum(os.path.getsize(f.path) for f in self.files if os.path.exists(f.path))

    def sql(self, query: str, parameters: list[Any] | None = None) -> Result:
        """Run one SQL statement; a DuckDB error becomes ``AnalyticsError`` with its text."""
        duckdb = _duckdb()
        if self.read_only:
            self._check_reading(query)
        try:
            # The fold is computed on first use: a report on tool calls never pays for it.
            if not self._fold_stored and FOLD_READERS.search(query):
                store_fold(self._con)
                self._fold_stored = True
            if not self._status_stored and reads_sessions(query):
                store_status(self._con, self.files, cached=self._cached_statuses)  # R-SET-5
                self._status_stored = True
            self._create_pending(query)
            cursor = self._con.execute(query, parameters or [])
            columns = [d[0] for d in cursor.description or []]
            rows = cursor.fetchall() if columns else []
        except duckdb.Error as exc:
            raise AnalyticsError(f"query failed: {exc}") from None
        return Result(columns, rows)

    def _check_reading(self, query: str) -> None:
        """Refuse any statement that does more than read, as DuckDB's own parser classifies it
        (files and settings are already out of reach: ``_lock_down``)."""
        duckdb = _duckdb()
        try:
            statements = self._con.extract_statements(query)
        except duckdb.Error as exc:
            raise AnalyticsError(f"query failed: {exc}") from None
        for statement in statements:
            kind = statement.type
            if kind not in (duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN):
                name = str(kind).rpartition(".")[2]
                raise AnalyticsError(
                    f"query refused: only reading statements run here (SELECT, WITH, "
                    f"EXPLAIN, SHOW, DESCRIBE), not {name}"
                )

    def report(self, name: str) -> Result:
        """One of ``REPORTS`` by name (``tools``, ``retries``, ``tokens-by-day``)."""
        if name not in REPORTS:
            raise AnalyticsError(f"unknown report {name!r}; choose one of {', '.join(REPORTS)}")
        return self.sql(REPORTS[name])

    def export_parquet(self, directory: str | os.PathLike[str]) -> dict[str, int]:
        """Write every view as Parquet under ``directory/<view>/day=<yyyy-mm-dd>/``
        (Hive partitioning, readable by DuckDB, Spark, Trino, Polars); returns rows per view.
        Existing files of the same names are overwritten."""
        if self.read_only:
            raise AnalyticsError("this fleet is read-only: open it without read_only to export")
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        counts: dict[str, int] = {}
        for view in VIEWS:
            out = (target / view).as_posix().replace("'", "''")
            self.sql(f"CREATE OR REPLACE TEMP TABLE _export AS SELECT * FROM {view}")
            self.sql(
                f"COPY _export TO '{out}' (FORMAT parquet, PARTITION_BY (day), "
                "OVERWRITE_OR_IGNORE, FILENAME_PATTERN 'part_{i}')"
            )
            counts[view] = int(self.sql("SELECT count(*) FROM _export").rows[0][0])
        self.sql("DROP TABLE _export")
        return counts


def open_fleet(
    *,
    home: str | os.PathLike[str] | None = None,
    traces: str | None = None,
    project: str | None = None,
    agent: str | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    threads: int | None = None,
    read_only: bool = False,
    cache: bool = False,
    parquet: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Fleet:
    """Build the views over every trace file of a data root (``home``; default
    ``$PENGUIN_HOME``, else ``~/.penguin/data``) or of a glob (``traces``, ``**`` allowed).

    Damaged lines never fail the build: they are rows of ``diagnostics`` (the tolerant
    reader's decisions).  ``project``/``agent`` keep only the files of that project or agent.
    Raises ``AnalyticsUnavailable`` without DuckDB and
    ``AnalyticsError`` when given both sources.

    ``read_only`` (``penguin query``): once the views are built, the connection can neither
    read nor write a file, attach a database, load an extension or change a setting (DuckDB's
    ``enable_external_access`` off, then ``lock_configuration`` on), and ``sql`` runs only
    statements DuckDB parses as reading ones; ``export_parquet`` needs a writable fleet.

    ``cache`` (a data root only): the views read the root's Parquet cache
    (``<home>/.cache/analytics-v1``), refreshed first -- only the bytes appended since the
    last refresh are read, only the sessions whose files changed are folded again -- with the
    same rows as without it.  A root where the cache cannot be written is read without it.

    ``parquet``: the views over a Parquet export instead (``export_parquet``'s directory, or
    its copy on object storage: ``s3://bucket/prefix`` and any other fsspec URL, with
    ``storage_options`` for its filesystem); the named reports run on it unchanged.
    """
    duckdb = _duckdb()
    if home is not None and traces is not None:
        raise AnalyticsError("give a data root or a glob of trace files, not both")
    if parquet is not None and (home is not None or traces is not None):
        raise AnalyticsError("give one source: Parquet, not both it and trace files")
    if parquet is not None:
        return _open_parquet(duckdb, parquet, storage_options, threads=threads, read_only=read_only)
    if traces is None and home is None:
        env = os.environ.get("PENGUIN_HOME")
        home = env if env else Path("~/.penguin/data").expanduser()

    def chosen(files: list[TraceFile]) -> list[TraceFile]:
        return [
            f
            for f in files
            if (project is None or f.project == project) and (agent is None or f.agent == agent)
        ]

    # With the cache, the root's listing is the cache's own (``_scan``: unchanged directories
    # are not listed again, archived files are not fetched); without it, every file.
    plan = None
    if cache and traces is None and home is not None:
        plan = plan_refresh(home, max_line_bytes=max_line_bytes)
    files: list[TraceFile] | Callable[[], list[TraceFile]] = []
    if traces is not None:
        files = files_from_glob(traces)
    elif plan is None:
        assert home is not None
        files = chosen(files_from_root(home))
    con = duckdb.connect(":memory:")
    info: CacheInfo | None = None
    pending: dict[str, str] = {}
    statuses: str | None = None
    try:
        if threads is not None:
            con.execute(f"SET threads = {int(threads)}")
        # R-SET-5: the status asks the locks when a query runs (the cache keeps only the folds).
        create_status_table(con)
        if plan is not None:
            show = None
            if project is not None or agent is not None:
                show = plan.scan.sessions_of(project=project, agent=agent)
            cached = cached_views(con, plan, show=show, max_line_bytes=max_line_bytes)
            if cached is not None:
                info, pending, statuses = cached
                scan = plan.scan
                files = lambda: chosen(scan.files(show))  # noqa: E731 - when first asked
            else:
                assert home is not None
                files = chosen(files_from_root(home))
        if info is None:
            assert isinstance(files, list)
            load(con, files, max_line_bytes=max_line_bytes)
            create_views(con)
        if read_only:
            if info is not None:
                # The views read the cache's segments when a query runs: those files only.
                con.execute("SET allowed_paths = ?", [list(info.segments)])
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
    except duckdb.Error as exc:
        con.close()
        raise AnalyticsError(f"building the views failed: {exc}") from None
    except BaseException:
        con.close()
        raise
    fleet = Fleet(con, files, read_only=read_only, cache=info)
    fleet._pending = pending
    fleet._cached_statuses = statuses
    return fleet


def _open_parquet(
    duckdb: Any,
    location: str,
    storage_options: Mapping[str, Any] | None,
    *,
    threads: int | None,
    read_only: bool,
) -> Fleet:
    con = duckdb.connect(":memory:")
    try:
        if threads is not None:
            con.execute(f"SET threads = {int(threads)}")
        create_status_table(con)
        load(con, [], max_line_bytes=MAX_LINE_BYTES)
        create_views(con)  # empty: their columns, for the views without files
        read = parquet_views(con, location, storage_options=storage_options, materialize=read_only)
        if read_only:
            local = [f for f in read if "://" not in f]
            if local:
                # Local files are read when a query runs: those files only.
                con.execute("SET allowed_paths = ?", [local])
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
    except duckdb.Error as exc:
        con.close()
        raise AnalyticsError(f"reading the Parquet views failed: {exc}") from None
    except BaseException:
        con.close()
        raise
    fleet = Fleet(con, [], read_only=read_only)
    fleet._fold_stored = fleet._status_stored = True  # nothing to compute: Parquet rows
    return fleet
