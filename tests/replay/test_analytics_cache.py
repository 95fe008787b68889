"""The analytics Parquet cache (``open_fleet(cache=True)``): a projection of the traces, never a
second source of truth (SPEC §23: what a host keeps besides the trace can be deleted and
rebuilt).  Every test compares every view, row for row, with the views built from the files
without the cache -- the same tolerant reader's decisions (R-READ-1..4, R-ROOT-10,
R-TRACE-17) -- after appends, torn tails, truncation, replacement and deletion.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from eventstore import TokenCounts, encode_line
from eventstore import builders as b

pytest.importorskip("duckdb")

from fleetkit import generate_fleet

from replay.analytics import VIEWS, AnalyticsError, open_fleet


def cache_dir(home: Path) -> Path:
    return home / ".cache" / "analytics-v1"


def _views(home: Path, **options: Any) -> tuple[dict[str, list[str]], Any]:
    with open_fleet(home=home, **options) as fleet:
        rows = {v: sorted(repr(r) for r in fleet.sql(f"SELECT * FROM {v}").rows) for v in VIEWS}
        return rows, fleet.cache


class _Refresh:
    def __init__(self, rows: dict[str, list[str]], info: Any) -> None:
        self.rows = rows
        self.sessions_rebuilt = info.sessions_rebuilt
        self.files_read = info.files_read
        self.bytes_read = info.bytes_read


def _same(home: Path, **options: Any) -> _Refresh:
    """The cached views equal the views from the files; returns what the refresh did."""
    expected, _ = _views(home, **options)
    cached, info = _views(home, cache=True, **options)
    assert info is not None
    for view in VIEWS:
        assert cached[view] == expected[view], view
    return _Refresh(cached, info)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    generate_fleet(tmp_path / "home", 8, seed=5, damage=True)
    return tmp_path / "home"


def _files(home: Path) -> list[Path]:
    return sorted(home.glob("*/agents/*/traces/*/*.jsonl"))


def _latest(home: Path) -> list[Path]:
    """Each session's highest-index file: the only one a writer appends to, truncates or
    rewrites (R-TRACE-8, R-ROOT-10); a rotated file is closed (``test_analytics_cache_listing``
    has what the cache assumes of it)."""
    last: dict[str, Path] = {}
    for p in _files(home):
        last[p.name.rsplit("_", 1)[0]] = p
    return sorted(last.values())


def _turn(ts: str = "2026-07-01T11:00:00.000Z") -> bytes:
    counts = TokenCounts(cache_read=1, cache_write=2, output=3, total=6)
    records = [
        b.request_begin(timestamp=ts),
        b.request_end("completed", timestamp=ts),
        b.token_usage(counts, timestamp=ts),
    ]
    return b"".join(encode_line(r) for r in records)


def test_cached_views_equal_the_files_and_a_warm_refresh_reads_nothing(home: Path) -> None:
    info = _same(home)
    assert info.sessions_rebuilt == 8 and info.files_read == len(_files(home))
    again = _same(home)
    assert (again.sessions_rebuilt, again.files_read, again.bytes_read) == (0, 0, 0)


def test_appended_lines_are_read_from_the_byte_offset_on(home: Path) -> None:
    _same(home)
    target = _latest(home)[-1]
    added = _turn()
    with open(target, "ab") as f:
        f.write(added)
    info = _same(home)
    # Only the appended bytes were read, and only that session was folded again.
    assert (info.sessions_rebuilt, info.files_read, info.bytes_read) == (1, 1, len(added))


def test_a_torn_tail_is_reported_then_read_once_completed_r_trace_17(home: Path) -> None:
    _same(home)
    target = _latest(home)[0]
    line = _turn().split(b"\n")[0]
    with open(target, "ab") as f:
        f.write(line[:20])  # a writer mid-line: a torn_tail diagnostic, never cached
    torn = _same(home).rows
    assert any("no terminating newline" in row for row in torn["diagnostics"])
    with open(target, "ab") as f:
        f.write(line[20:] + b"\n")
    healed = _same(home).rows
    assert not any(str(target) in row and "terminating" in row for row in healed["diagnostics"])


def test_truncated_replaced_and_deleted_files_are_noticed(home: Path) -> None:
    _same(home)
    files = _latest(home)
    # Truncated to its first three lines (a repair, or a copy back from a backup).
    lines = files[0].read_bytes().splitlines(keepends=True)
    files[0].write_bytes(b"".join(lines[:3]))
    _same(home)
    # Replaced by another file with the same size and more: the bytes before the cursor differ.
    other = files[1].read_bytes()
    tmp = files[1].with_suffix(".tmp")
    tmp.write_bytes(other.replace(b'"completed"', b'"failed"   ') + _turn())
    os.replace(tmp, files[1])
    _same(home)
    # Rewritten in place, same inode, same length: the bytes before the cursor differ.
    data = files[2].read_bytes()
    with open(files[2], "r+b") as f:
        f.write(data.replace(b'"completed"', b'"aborted"'))
    _same(home)
    # A file deleted, then a whole session.
    files[3].unlink()
    _same(home)
    sid = files[4].name.rsplit("_", 1)[0]
    for path in _files(home):
        if path.name.startswith(sid):
            path.unlink()
    _same(home)
    # And a new session.
    generate_fleet(home / "new", 1, seed=99)
    for path in (home / "new").rglob("*.jsonl"):
        dest = home / path.relative_to(home / "new")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(path, dest)
    shutil.rmtree(home / "new")
    _same(home)


def test_deleting_the_cache_and_rebuilding_gives_identical_views(home: Path) -> None:
    _same(home)
    with open(_latest(home)[-1], "ab") as f:
        f.write(_turn())
    before, _ = _views(home, cache=True)
    shutil.rmtree(cache_dir(home))
    after, info = _views(home, cache=True)
    assert info.sessions_rebuilt == 8
    assert after == before


def test_a_damaged_manifest_or_missing_segment_means_a_rebuild(home: Path) -> None:
    _same(home)
    (cache_dir(home) / "manifest.json").write_bytes(b"{not json")
    assert _same(home).sessions_rebuilt == 8
    manifest = json.loads((cache_dir(home) / "manifest.json").read_bytes())
    (cache_dir(home) / manifest["segments"]["tool_calls"][0]).unlink()
    assert _same(home).sessions_rebuilt == 8


def test_project_and_agent_filters_and_the_fixtures(tmp_path: Path) -> None:
    home = tmp_path / "home"
    generate_fleet(home, 9, seed=8)
    _same(home, project="evals")
    _same(home, agent="default_agent")
    _same(home)


def test_many_refreshes_compact_the_segments(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("replay.analytics._cache._MAX_SEGMENTS", 2)
    target = _latest(home)[0]
    for _ in range(3):
        with open(target, "ab") as f:
            f.write(_turn())
        _same(home)
    manifest = json.loads((cache_dir(home) / "manifest.json").read_bytes())
    assert manifest["retired"]  # the compacted segments, deleted once no query can read them
    assert all(len(names) <= 2 for names in manifest["segments"].values())


def test_a_cached_read_only_query_reads_no_other_file(home: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    with open_fleet(home=home, cache=True, read_only=True) as fleet:
        assert fleet.cache is not None
        assert fleet.report("tools").rows
        with pytest.raises(AnalyticsError):
            fleet.sql(f"SELECT * FROM read_csv('{secret}')")


def test_an_unwritable_cache_falls_back_to_the_files(home: Path) -> None:
    (home / ".cache").write_text("not a directory")
    expected, _ = _views(home)
    cached, info = _views(home, cache=True)
    assert info is None
    assert cached == expected


def test_penguin_query_reads_the_cache_unless_told_not_to(home: Path) -> None:
    from typer.testing import CliRunner

    from penguin.cli import app

    args = ["--home", str(home), "query", "--report", "tools", "--format", "json"]
    uncached = CliRunner().invoke(app, [*args, "--no-cache"])
    assert uncached.exit_code == 0, uncached.output
    assert not (cache_dir(home) / "manifest.json").exists()
    cached = CliRunner().invoke(app, args)
    assert cached.exit_code == 0, cached.output
    assert (cache_dir(home) / "manifest.json").exists()
    assert json.loads(cached.stdout) == json.loads(uncached.stdout)
