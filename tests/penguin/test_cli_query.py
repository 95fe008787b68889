"""``penguin query`` and ``penguin export-parquet`` (issue 21) through typer's CliRunner: the
three output formats, the named reports, data root vs glob, exit codes, terminal safety, and
the install hint when DuckDB is not installed (the module hidden from the import system)."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from penguin.cli import app

FIXTURES = Path(__file__).parents[2] / "fixtures" / "traces"
RETRY_GLOB = str(FIXTURES / "retry" / "**" / "*.jsonl")


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_without_duckdb_the_commands_say_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # None in sys.modules makes `import duckdb` raise ImportError, as if it were not installed.
    monkeypatch.setitem(sys.modules, "duckdb", None)
    for args in (["query", "SELECT 1"], ["export-parquet", str(tmp_path / "out")]):
        code, out, err = _run("--home", str(tmp_path), *args)
        assert code == 2
        assert "pip install 'penguin-engine[analytics]'" in err
        assert out == ""
    assert not (tmp_path / "out").exists()


def test_library_without_duckdb_raises_with_the_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    from replay.analytics import AnalyticsError, AnalyticsUnavailable, open_fleet

    monkeypatch.setitem(sys.modules, "duckdb", None)
    with pytest.raises(AnalyticsUnavailable, match=r"pip install 'penguin-engine\[analytics\]'"):
        open_fleet(traces="nothing-*.jsonl")
    assert issubclass(AnalyticsUnavailable, AnalyticsError)
    assert issubclass(AnalyticsUnavailable, ImportError)


def test_cli_start_does_not_import_duckdb() -> None:
    """CLI start time matters: DuckDB is imported only when a query runs."""
    code = (
        "import sys, penguin.cli._app\n"
        "assert sys.modules.get('duckdb') is None, 'duckdb imported at CLI start'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _has_duckdb() -> bool:
    try:
        import duckdb  # noqa: F401
    except ImportError:
        return False
    return True


needs_duckdb = pytest.mark.skipif(not _has_duckdb(), reason="the analytics extra is not installed")


@needs_duckdb
def test_query_formats(tmp_path: Path) -> None:
    sql = "SELECT kind, status, attempt, retry_in_ms, total FROM requests ORDER BY seq"
    code, out, _ = _run("query", sql, "--traces", RETRY_GLOB, "--format", "csv")
    assert code == 0
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["kind", "status", "attempt", "retry_in_ms", "total"]
    assert [r[1] for r in rows[1:]] == ["timeout", "malformed", "completed"]
    assert [r[3] for r in rows[1:]] == ["5", "10", ""]

    code, out, _ = _run("query", sql, "--traces", RETRY_GLOB, "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert [r["attempt"] for r in data] == [1, 2, 3]

    code, out, _ = _run("query", sql, "--traces", RETRY_GLOB)
    assert code == 0
    assert "malformed" in out and "3 row(s)" in out


@needs_duckdb
def test_named_reports_and_home(tmp_path: Path) -> None:
    from fleetkit import generate_fleet

    home = tmp_path / "home"
    generate_fleet(home, 8, seed=5)
    for name in ("tools", "retries", "tokens-by-day"):
        code, out, err = _run("query", "--home", str(home), "--report", name, "--format", "json")
        assert code == 0, err
        assert json.loads(out), name
    # The global --home works too, and --project narrows the files.
    code, out, _ = _run(
        "--home", str(home), "--project", "evals", "query", "SELECT DISTINCT project FROM sessions",
        "--format", "csv",
    )  # fmt: skip
    assert code == 0
    assert out.splitlines() == ["project", "evals"]


@needs_duckdb
def test_usage_errors_exit_2(tmp_path: Path) -> None:
    code, _, err = _run("query", "--home", str(tmp_path))
    assert code == 2 and "give SQL or --report" in err
    code, _, err = _run("query", "--home", str(tmp_path), "--report", "nope")
    assert code == 2 and "unknown report" in err
    code, _, err = _run("query", "SELECT * FROM nope", "--home", str(tmp_path))
    assert code == 2 and "query failed" in err
    code, _, err = _run("query", "SELECT 1", "--home", str(tmp_path), "--traces", "x")
    assert code == 2 and "not both" in err


@needs_duckdb
def test_untrusted_values_are_escaped_in_every_format() -> None:
    glob = str(FIXTURES / "hostile" / "escapes_everywhere_001.jsonl")
    for fmt in ("table", "csv", "json"):
        code, out, _ = _run("query", "SELECT * FROM records", "--traces", glob, "--format", fmt)
        assert code == 0
        assert "\x1b" not in out and "\x9b" not in out and "\u202e" not in out, fmt


@needs_duckdb
def test_export_parquet(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    code, _, err = _run("export-parquet", str(out_dir), "--traces", RETRY_GLOB)
    assert code == 0, err
    assert "requests" in err and "MiB read" in err
    files = sorted(p.relative_to(out_dir).as_posix() for p in out_dir.rglob("*.parquet"))
    assert "requests/day=2026-11-30/part_0.parquet" in files
    import duckdb

    con = duckdb.connect()
    n = con.execute(
        f"SELECT count(*) FROM read_parquet('{out_dir}/requests/**/*.parquet')"
    ).fetchone()
    assert n == (3,)
