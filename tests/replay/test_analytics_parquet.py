"""The views over a Parquet export, local or on object storage through fsspec
(``open_fleet(parquet=...)``, ``penguin query --parquet``): the named reports give the rows
they give on the traces, and a read-only fleet still reads no other file.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

pytest.importorskip("duckdb")
fsspec = pytest.importorskip("fsspec")

from fleetkit import generate_fleet  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from penguin.cli import app  # noqa: E402
from replay.analytics import REPORTS, VIEWS, AnalyticsError, open_fleet  # noqa: E402


def _rows(fleet: object, query: str) -> list[str]:
    return sorted(repr(r) for r in fleet.sql(query).rows)  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[str]]]:
    home = tmp_path_factory.mktemp("fleet") / "home"
    generate_fleet(home, 10, seed=4, damage=True)
    out = home.parent / "parquet"
    with open_fleet(home=home) as fleet:
        fleet.export_parquet(out)
        reports = {name: _rows(fleet, sql) for name, sql in REPORTS.items()}
        reports |= {v: [str(fleet.sql(f"SELECT count(*) FROM {v}").rows[0][0])] for v in VIEWS}
    return out, reports


def _same(location: str, want: dict[str, list[str]], **options: object) -> None:
    with open_fleet(parquet=location, **options) as fleet:  # type: ignore[arg-type]
        for name, sql in REPORTS.items():
            assert _rows(fleet, sql) == want[name], name
        for v in VIEWS:
            assert [str(fleet.sql(f"SELECT count(*) FROM {v}").rows[0][0])] == want[v], v


def test_reports_on_a_local_export_equal_the_reports_on_the_traces(
    exported: tuple[Path, dict[str, list[str]]],
) -> None:
    out, want = exported
    _same(str(out), want)
    _same(str(out), want, read_only=True)


def test_reports_on_an_export_in_an_fsspec_filesystem(
    exported: tuple[Path, dict[str, list[str]]], tmp_path: Path
) -> None:
    out, want = exported
    prefix = f"/bucket-{uuid.uuid4().hex}/penguin"
    fs = fsspec.filesystem("memory")
    fs.put(str(out), prefix, recursive=True)
    _same(f"memory://{prefix.lstrip('/')}", want)
    # Read-only: the rows are read up front, then no file at all can be read.
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    with open_fleet(parquet=f"memory://{prefix.lstrip('/')}", read_only=True) as fleet:
        assert _rows(fleet, REPORTS["tools"]) == want["tools"]
        with pytest.raises(AnalyticsError):
            fleet.sql(f"SELECT * FROM read_csv('{secret}')")
    # Through the CLI, in this process (the memory filesystem is the process's).
    result = CliRunner().invoke(
        app,
        [
            "query",
            "--parquet",
            f"memory://{prefix.lstrip('/')}",
            "--report",
            "tools",
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)) == len(want["tools"])


def test_a_missing_export_or_filesystem_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(AnalyticsError, match="no such directory"):
        open_fleet(parquet=str(tmp_path / "nothing"))
    with pytest.raises(AnalyticsError, match="no filesystem"):
        open_fleet(parquet="nosuchscheme://bucket/x")
    with pytest.raises(AnalyticsError, match="one source"):
        open_fleet(parquet=str(tmp_path), home=tmp_path)


def test_reports_on_an_export_in_s3_through_s3fs(
    exported: tuple[Path, dict[str, list[str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against a real S3 protocol server on loopback (moto's server mode)."""
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    out, want = exported
    for name, value in (
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        monkeypatch.setenv(name, value)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        options = {"client_kwargs": {"endpoint_url": endpoint}}
        fs = fsspec.filesystem("s3", **options)
        fs.mkdir("fleet")
        fs.put(str(out), "fleet/penguin", recursive=True)
        _same("s3://fleet/penguin", want, storage_options=options)
        result = CliRunner().invoke(
            app,
            [
                "query",
                "--parquet",
                "s3://fleet/penguin",
                "--storage-option",
                f"endpoint_url={endpoint}",
                "--report",
                "retries",
                "--format",
                "json",
            ],
        )
        assert result.exit_code == 0, result.output
        assert len(json.loads(result.stdout)) == len(want["retries"])
    finally:
        server.stop()
