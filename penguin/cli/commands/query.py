"""``penguin query`` and ``penguin export-parquet``: fleet analytics with DuckDB (issue 21).

Owns: the two commands' options, choosing the trace files (``--home`` / ``--traces``, the
global ``--home/--project/--agent``), printing a result as a table, CSV or JSON (untrusted
values escaped for the terminal), and the install hint when DuckDB is missing.  Does not: build
views or run SQL itself (``replay.analytics``).  DuckDB is imported only when a command runs,
so the CLI starts as fast without it.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from penguin.cli.errors import CliError, errors_to_exit_codes
from penguin.cli.globalopts import Globals
from penguin.cli.terminal.console import err_console, out_console, write_json
from penguin.cli.terminal.safe import safe

if TYPE_CHECKING:
    from replay.analytics import Fleet, Result

__all__ = ["export_parquet", "query"]

# The help texts name the views and reports without importing the analytics layer (which pulls
# the whole library into `penguin --help`); a test keeps these equal to replay.analytics'.
VIEW_NAMES: Final = ("sessions", "records", "requests", "tool_calls", "usage", "diagnostics")
REPORT_NAMES: Final = ("tools", "retries", "tokens-by-day")


class OutputFormat(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


HomeOpt = Annotated[
    Path | None,
    typer.Option(
        "--home",
        help="Data root to read (overrides the global --home and $PENGUIN_HOME).",
        show_default=False,
    ),
]
TracesOpt = Annotated[
    str | None,
    typer.Option(
        "--traces",
        help="A glob of trace files instead of a data root, e.g. 'runs/**/*.jsonl'.",
        show_default=False,
        metavar="GLOB",
    ),
]


@contextmanager
def _fleet(
    ctx: typer.Context,
    home: Path | None,
    traces: str | None,
    *,
    read_only: bool = False,
    cache: bool = False,
) -> Iterator[Fleet]:
    from replay.analytics import AnalyticsError, AnalyticsUnavailable
    from replay.analytics import open_fleet as _open_fleet

    g = ctx.find_object(Globals) or Globals()
    if traces is None:
        Globals(home=home if home is not None else g.home).existing_root()
    try:
        fleet = _open_fleet(
            home=home if home is not None or traces is not None else g.home,
            traces=traces,
            project=g.project,
            agent=g.agent,
            read_only=read_only,
            cache=cache and traces is None,
        )
    except AnalyticsUnavailable as exc:
        raise CliError(str(exc)) from None
    except AnalyticsError as exc:
        raise CliError(str(exc)) from None
    with fleet:
        yield fleet


def _options(pairs: list[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CliError(
                f"--storage-option {safe(pair, keep_newlines=False)!r}: expected KEY=VALUE"
            )
        key = key.strip()
        if key == "endpoint_url":  # s3fs takes it among the client's arguments
            options.setdefault("client_kwargs", {})["endpoint_url"] = value
        else:
            options[key] = {"true": True, "false": False}.get(value.lower(), value)
    return options


@contextmanager
def _parquet_fleet(location: str, pairs: list[str]) -> Iterator[Fleet]:
    from replay.analytics import AnalyticsError, AnalyticsUnavailable
    from replay.analytics import open_fleet as _open_fleet

    try:
        fleet = _open_fleet(parquet=location, storage_options=_options(pairs), read_only=True)
    except (AnalyticsUnavailable, AnalyticsError) as exc:
        raise CliError(str(exc)) from None
    with fleet:
        yield fleet


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    return str(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def _print(result: Result, fmt: OutputFormat) -> None:
    if fmt is OutputFormat.json:
        write_json([{k: _jsonable(v) for k, v in row.items()} for row in result.dicts()])
        return
    if fmt is OutputFormat.csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow([safe(c) for c in result.columns])
        for row in result.rows:
            writer.writerow([safe(_cell(v)) for v in row])
        sys.stdout.flush()
        return
    # Here: JSON and CSV need no rich table (its import is a tenth of a JSON report's start).
    from rich.table import Table
    from rich.text import Text

    table = Table(show_edge=False, pad_edge=False)
    for column in result.columns:
        table.add_column(safe(column, keep_newlines=False), overflow="fold")
    for row in result.rows:
        table.add_row(*(Text(safe(_cell(v), keep_newlines=False)) for v in row))
    console = out_console()
    console.print(table)
    console.print(Text(f"{len(result.rows)} row(s)", style="dim"))


def query(
    ctx: typer.Context,
    sql: Annotated[
        str | None,
        typer.Argument(
            help=f"SQL over the views {', '.join(VIEW_NAMES)}.", show_default=False, metavar="SQL"
        ),
    ] = None,
    home: HomeOpt = None,
    traces: TracesOpt = None,
    fmt: Annotated[
        OutputFormat, typer.Option("--format", help="Output format.", case_sensitive=False)
    ] = OutputFormat.table,
    report: Annotated[
        str | None,
        typer.Option(
            "--report",
            help=f"A named report instead of SQL: {', '.join(REPORT_NAMES)}.",
            show_default=False,
            metavar="NAME",
        ),
    ] = None,
    parquet: Annotated[
        str | None,
        typer.Option(
            "--parquet",
            help="The views of a Parquet export instead (export-parquet's DIR), local or on "
            "object storage through fsspec: s3://BUCKET/PREFIX, gs://..., with the "
            "filesystem's credentials from its usual environment.",
            show_default=False,
            metavar="DIR|URL",
        ),
    ] = None,
    storage_option: Annotated[
        list[str] | None,
        typer.Option(
            "--storage-option",
            help="With --parquet URL: an option of its fsspec filesystem, KEY=VALUE "
            "(repeatable; e.g. endpoint_url=http://127.0.0.1:9000 for s3://).",
            metavar="KEY=VALUE",
        ),
    ] = None,
    cache: Annotated[
        bool,
        typer.Option(
            "--cache/--no-cache",
            help="Read the data root's Parquet cache of the views (<home>/.cache/analytics-v1), "
            "refreshed first with what changed; --no-cache reads every trace file.",
        ),
    ] = True,
) -> None:
    """SQL over every session's trace with DuckDB (needs the `analytics` extra).

    Views: sessions, records, requests (one row per request span, as `stats`), tool_calls,
    usage (one row per token_usage), diagnostics (damaged lines, skipped as the reader skips
    them).  Example: penguin query "SELECT model, sum(total) FROM requests GROUP BY model".
    On a data root the views come from its Parquet cache, refreshed from the bytes appended
    since the last query (delete <home>/.cache/analytics-v1 at any time: it is rebuilt).
    """
    from replay.analytics import AnalyticsError

    with errors_to_exit_codes():
        if (sql is None) == (report is None):
            raise CliError("give SQL or --report NAME (one of them)")
        if report is not None and report not in REPORT_NAMES:
            raise CliError(f"unknown report {report!r}; choose one of {', '.join(REPORT_NAMES)}")
        if parquet is not None and (home is not None or traces is not None):
            raise CliError("--parquet reads an export: give it alone, without --home/--traces")
        opened = (
            _parquet_fleet(parquet, storage_option or [])
            if parquet is not None
            else _fleet(ctx, home, traces, read_only=True, cache=cache)
        )
        with opened as fleet:
            try:
                result = fleet.report(report) if report is not None else fleet.sql(sql or "")
            except AnalyticsError as exc:
                raise CliError(str(exc)) from None
            _print(result, fmt)


def export_parquet(
    ctx: typer.Context,
    directory: Annotated[
        Path,
        typer.Argument(help="Where to write <view>/day=<date>/*.parquet.", metavar="DIR"),
    ],
    home: HomeOpt = None,
    traces: TracesOpt = None,
) -> None:
    """Write the analytics views as Parquet partitioned by day (needs the `analytics` extra).

    For Spark, Trino, Polars or DuckDB elsewhere: read DIR/<view>/**/*.parquet with Hive
    partitioning.  Files already there with the same names are overwritten.
    """
    from rich.text import Text

    from replay.analytics import AnalyticsError

    with errors_to_exit_codes():
        start = time.perf_counter()
        with _fleet(ctx, home, traces) as fleet:
            try:
                counts = fleet.export_parquet(directory)
            except AnalyticsError as exc:
                raise CliError(str(exc)) from None
            size = fleet.bytes_read
        elapsed = time.perf_counter() - start
        console = err_console()
        for view, n in counts.items():
            console.print(Text(f"{view:<12} {n:>10} row(s)"))
        console.print(
            Text(
                f"{len(fleet.files)} trace file(s), {size / 2**20:.1f} MiB read in "
                f"{elapsed:.2f} s -> {safe(str(directory), keep_newlines=False)}"
            )
        )
