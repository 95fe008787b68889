"""The views over a Parquet export, local or on object storage (through fsspec).

Owns: finding each view's files under ``<location>/<view>/`` (``export_parquet``'s layout,
Hive-partitioned by ``day``), registering the fsspec filesystem of a URL (``s3://``,
``gs://``, ``memory://`` ...) with DuckDB, and the views over those files, in the columns of
the views built from traces (a view with no file is empty, with its columns).  Does not: write
Parquet (``Fleet.export_parquet``) or build views from traces (``_load``, ``_views``).
"""

from __future__ import annotations

import glob as globlib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._exceptions import AnalyticsError
from ._views import VIEWS

if TYPE_CHECKING:
    import duckdb

__all__ = ["parquet_views"]


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def parquet_views(
    con: duckdb.DuckDBPyConnection,
    location: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    materialize: bool = False,
) -> list[str]:
    """Replace the (empty) views on ``con`` by views over the Parquet files at ``location``;
    returns the files read.  A URL with a scheme other than ``file`` is read through fsspec
    (``storage_options`` go to its filesystem: credentials, ``endpoint_url`` ...).
    ``materialize``: the rows of a remote location are read now, into tables (a read-only
    fleet then closes every file access: DuckDB cannot allow one remote path alone)."""
    scheme, sep, rest = location.partition("://")
    base = location.rstrip("/")
    if sep and scheme != "file":
        try:
            import fsspec  # type: ignore[import-untyped]
        except ImportError:
            raise AnalyticsError(
                f"reading {scheme}:// needs fsspec (and its {scheme} filesystem): "
                "pip install 'penguin-engine[analytics]'"
            ) from None
        try:
            fs = fsspec.filesystem(scheme, **dict(storage_options or {}))
        except (ImportError, ValueError) as exc:
            raise AnalyticsError(f"no filesystem for {scheme}://: {exc}") from None
        con.register_filesystem(fs)

        def find(view: str) -> list[str]:
            found = fs.glob(f"{base}/{view}/**/*.parquet")
            return sorted(p if "://" in p else f"{scheme}://{p.lstrip('/')}" for p in found)

    else:
        base = rest.rstrip("/") if sep else base
        if not os.path.isdir(base):
            raise AnalyticsError(f"{base}: no such directory of Parquet views")

        def find(view: str) -> list[str]:
            return sorted(
                globlib.glob(f"{globlib.escape(base)}/{view}/**/*.parquet", recursive=True)
            )

    read: list[str] = []
    for view in VIEWS:
        files = find(view)
        if not files:
            continue  # no rows: the empty view built from no trace keeps its columns
        columns = [row[0] for row in con.execute(f"DESCRIBE {view}").fetchall()]
        listed = "[" + ", ".join(_quote(f) for f in files) + "]"
        source = f"read_parquet({listed}, hive_partitioning = true, union_by_name = true)"
        there = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
        # The views' columns in their order; one an older export lacks is NULL.
        select = ", ".join(c if c in there else f"NULL AS {c}" for c in columns)
        query = f"SELECT {select} FROM {source}"
        if materialize and sep and scheme != "file":
            con.execute(f"CREATE OR REPLACE TEMP TABLE _parquet_{view} AS {query}")
            query = f"SELECT * FROM _parquet_{view}"
        con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS {query}")
        read += files
    return read
