"""The analytics cache's listing (``replay.analytics._scan``): a date directory whose inode and
mtime are unchanged is not listed again, and only each session's latest file is stat'ed in it
(R-ROOT-3: a session's files share one directory; R-TRACE-8: a rotated file is closed, never
written again).  Archived files (``eventstore.archive``) are listed from their record and read
from the cache, never fetched back for a report.  Every test compares every view, row for row,
with the views built from the files without the cache (SPEC §23: the cache is rebuildable).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from eventstore import DataRoot, TokenCounts, encode_line
from eventstore import builders as b

pytest.importorskip("duckdb")

from fleetkit import generate_fleet

from replay.analytics import VIEWS, open_fleet
from replay.analytics import _scan as scan_module


def _views(
    home: Path, views: tuple[str, ...] = VIEWS, **options: Any
) -> tuple[dict[str, list[str]], Any]:
    with open_fleet(home=home, **options) as fleet:
        rows = {v: sorted(repr(r) for r in fleet.sql(f"SELECT * FROM {v}").rows) for v in views}
        return rows, fleet.cache


# Every view but ``sessions``, whose status column folds the files (R-SET-5).
_NO_STATUS = tuple(v for v in VIEWS if v != "sessions")


def _same(home: Path) -> Any:
    """The cached views equal the views from the files; what the refresh did."""
    cached, info = _views(home, cache=True)
    expected, _ = _views(home)
    for view in VIEWS:
        assert cached[view] == expected[view], view
    return info


def _dirs(home: Path) -> list[Path]:
    return sorted(home.glob("*/agents/*/traces/*"))


def _files(home: Path) -> list[Path]:
    return sorted(home.glob("*/agents/*/traces/*/*.jsonl"))


_AGE = [3600]


def _age(home: Path) -> None:
    """Date every trace directory an hour (and one more second each call) back: their listings
    are no longer racy.  Never the same time twice: a directory changed and then aged must not
    get back the mtime its old listing recorded."""
    _AGE[0] += 1
    old = time.time_ns() - _AGE[0] * 1_000_000_000
    for d in _dirs(home):
        os.utime(d, ns=(old, old))


def _manifest(home: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (home / ".cache" / "analytics-v1" / "manifest.json").read_bytes()
    )
    return data


def _turn() -> bytes:
    counts = TokenCounts(cache_read=1, cache_write=2, output=3, total=6)
    ts = "2026-07-01T11:00:00.000Z"
    records = [
        b.request_begin(timestamp=ts),
        b.request_end("completed", timestamp=ts),
        b.token_usage(counts, timestamp=ts),
    ]
    return b"".join(encode_line(r) for r in records)


class _Listings:
    """Counts the directories listed (``_scan._list``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = scan_module._list

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(scan_module, "_list", counting)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    generate_fleet(tmp_path / "home", 12, seed=7, damage=True)
    return tmp_path / "home"


def _by_session(home: Path) -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    for p in _files(home):
        out.setdefault(p.name.rsplit("_", 1)[0], []).append(p)
    return out


def test_an_unchanged_directory_is_listed_once_and_a_racy_one_every_time(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listings = _Listings(monkeypatch)
    # Just written: a change in the same mtime tick could follow, so the listing is recorded
    # with mtime -1 (never matched) and taken again by every query.  (The window is widened so
    # that a slow machine cannot make the directories old enough meanwhile.)
    monkeypatch.setattr(scan_module, "_RACY_NS", 10**18)
    _same(home)
    assert all(d[1] == scan_module.UNTRUSTED for d in _manifest(home)["dirs"].values())
    before = listings.count
    assert _same(home).sessions_rebuilt == 0
    assert listings.count - before == len(_dirs(home))
    monkeypatch.setattr(scan_module, "_RACY_NS", 2_000_000_000)
    _age(home)
    _same(home)  # listed again (the mtimes moved) and recorded
    assert all(d[1] > 0 for d in _manifest(home)["dirs"].values())
    before = listings.count
    info = _same(home)
    assert info.sessions_rebuilt == 0 and info.files_read == 0
    assert listings.count == before  # nothing listed: every directory's mtime is as recorded


def test_appends_new_deleted_and_renamed_files_are_noticed_in_a_listed_directory(
    home: Path,
) -> None:
    _same(home)
    _age(home)
    _same(home)
    sessions = _by_session(home)
    rotated = next(files for files in sessions.values() if len(files) > 1)
    single = next(files for files in sessions.values() if len(files) == 1)
    # An append to a session's latest file: its directory does not change, the file does.
    with open(rotated[-1], "ab") as f:
        f.write(_turn())
    assert _same(home).sessions_rebuilt == 1
    # A rotation: a new file in the directory.
    _age(home)
    _same(home)
    nxt = rotated[-1].with_name(
        f"{rotated[-1].name.rsplit('_', 1)[0]}_{len(rotated) + 1:03d}.jsonl"
    )
    nxt.write_bytes(rotated[-1].read_bytes().splitlines(keepends=True)[0] + _turn())
    assert _same(home).sessions_rebuilt == 1
    # A closed file replaced by a rename (a restore from a backup) and one deleted.
    _age(home)
    _same(home)
    data = rotated[0].read_bytes()
    tmp = rotated[0].with_suffix(".tmp")
    tmp.write_bytes(data.replace(b'"completed"', b'"failed"   '))
    os.replace(tmp, rotated[0])
    assert _same(home).sessions_rebuilt == 1
    _age(home)
    _same(home)
    rotated[0].unlink()
    assert _same(home).sessions_rebuilt == 1
    # A whole session deleted.
    _age(home)
    _same(home)
    single[0].unlink()
    assert _same(home).sessions_rebuilt == 0  # gone: nothing to fold, its rows dropped


def test_a_closed_file_rewritten_in_place_waits_for_its_directory_to_change(home: Path) -> None:
    """The documented limit: a rotated file is immutable (R-TRACE-8), so in a directory whose
    listing still holds it is not stat'ed; the next change to the directory notices it."""
    _same(home)
    _age(home)
    _same(home)
    rotated = next(files for files in _by_session(home).values() if len(files) > 1)
    data = rotated[0].read_bytes()
    with open(rotated[0], "r+b") as f:  # same inode, same length, in place
        f.write(data.replace(b'"completed"', b'"aborted"  '))
    stale, info = _views(home, cache=True)
    assert info.sessions_rebuilt == 0
    assert stale != _views(home)[0]
    # A lock file comes and goes: the directory is listed again and the file stat'ed.
    lock = rotated[0].parent / "unrelated.lock"
    lock.write_bytes(b"")
    lock.unlink()
    assert _same(home).sessions_rebuilt == 1


def test_a_racy_listing_notices_a_file_added_in_the_same_tick(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing taken right after its directory changed is not trusted: a file created and
    the directory's mtime put back where it was (as a second change in the same clock tick
    would leave it) is still found."""
    monkeypatch.setattr(scan_module, "_RACY_NS", 10**18)  # "right after", however slow the test
    _same(home)
    directory = _dirs(home)[0]
    st = directory.stat()
    sid = "session-2026-07-01-23-59-59-abcdef01"
    head = _files(home)[0].read_bytes().splitlines(keepends=True)[0]
    (directory / f"{sid}_001.jsonl").write_bytes(head + _turn())
    os.utime(directory, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert directory.stat().st_mtime_ns == st.st_mtime_ns
    assert _same(home).sessions_rebuilt == 1


# --------------------------------------------------------------------------- archived files


def _rotated(home: Path) -> tuple[str, list[Path]]:
    """A session of several files, each ending with a complete line (a torn tail is classified
    on every query, never cached: such a file is fetched back to be read)."""
    return next(
        (sid, files)
        for sid, files in _by_session(home).items()
        if len(files) > 1 and all(p.read_bytes().endswith(b"\n") for p in files)
    )


def _archive(home: Path, store: Path, sid: str) -> None:
    from eventstore.archive import archive_session

    outcomes = archive_session(DataRoot(home), sid, to=str(store))
    assert outcomes and all(o.status == "archived" for o in outcomes), outcomes


def test_archived_files_are_read_from_the_cache_not_fetched(home: Path, tmp_path: Path) -> None:
    pytest.importorskip("fsspec")
    _same(home)
    sid, files = _rotated(home)
    _archive(home, tmp_path / "store", sid)
    assert not any(p.exists() for p in files)
    with open_fleet(home=home, cache=True, read_only=True) as fleet:
        tools = fleet.report("tools").rows
        assert fleet.cache is not None
        # The directory changed (files removed, a record written): the session is folded
        # again from its cached lines; nothing is fetched or read.
        assert fleet.cache.sessions_rebuilt == 1
        assert (fleet.cache.files_read, fleet.cache.bytes_read) == (0, 0)
    assert not any(p.exists() for p in files)
    again, info = _views(home, _NO_STATUS, cache=True)
    assert info.sessions_rebuilt == 0
    assert not any(p.exists() for p in files)
    # The same rows as the files give (the uncached build fetches them back to read them).
    expected, _ = _views(home, _NO_STATUS)
    assert again == expected
    assert all(p.exists() for p in files)
    with open_fleet(home=home) as fleet:
        assert fleet.report("tools").rows == tools


def test_an_archived_session_resumed_reads_only_its_new_file(home: Path, tmp_path: Path) -> None:
    """A session archived whole, then its latest file fetched back and appended to (as
    ``resume`` does): the closed file's lines come from the cache, it stays on object storage."""
    pytest.importorskip("fsspec")
    from eventstore.archive import _fetch, read_record, record_path

    _same(home)
    sid, files = _rotated(home)
    _archive(home, tmp_path / "store", sid)
    _views(home, _NO_STATUS, cache=True)
    latest = next(
        e for e in read_record(record_path(files[0].parent, sid)) if e.name == files[-1].name
    )
    _fetch(files[-1].parent, latest)
    with open(files[-1], "ab") as f:
        f.write(_turn())
    cached, info = _views(home, _NO_STATUS, cache=True)
    assert info.sessions_rebuilt == 1 and info.files_read == 1
    assert not files[0].exists()
    expected, _ = _views(home, _NO_STATUS)  # fetches the rest back
    assert cached == expected


def test_the_status_of_an_archived_session_is_kept_or_fetched(home: Path, tmp_path: Path) -> None:
    """R-SET-5: the status is the lock's answer over a fold of the session's files.  The cache
    keeps the fold's two answers; archiving changes no file's name, size or mtime, so they are
    kept and nothing is fetched.  A session archived before the cache ever folded it is
    fetched back to be folded, as any reader of the store gets it."""
    pytest.importorskip("fsspec")
    query = "SELECT status FROM sessions WHERE session_id = ?"
    sid, files = _rotated(home)
    with open_fleet(home=home, cache=True) as fleet:
        before = fleet.sql(query, [sid]).rows
    _archive(home, tmp_path / "store", sid)
    with open_fleet(home=home, cache=True) as fleet:
        assert fleet.sql(query, [sid]).rows == before and before[0][0] != "unreadable"
    assert not any(p.exists() for p in files)

    shutil.rmtree(home / ".cache")
    with open_fleet(home=home, cache=True) as fleet:
        assert fleet.sql(query, [sid]).rows == before
    assert all(p.exists() for p in files)


def test_a_listing_that_cannot_be_recorded_still_reads_the_cache(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing to fold again, only a directory listed again: a manifest that cannot be written
    then (a full disk, a read-only copy) leaves the views on the cache, not on the files."""
    _same(home)
    _age(home)

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("replay.analytics._cache.write_private", refuse)
    info = _same(home)
    assert info is not None and info.sessions_rebuilt == 0
