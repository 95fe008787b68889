"""The workspace scan behind snapshots (SPEC §27, R-SNAP-1): a scan that reuses directory
listings it trusts (``ScanCache``) finds exactly what a fresh scan finds."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import ScanCache, SnapshotSettings, scan_workspace
from engine._snapshots import Snapshots
from eventstore import DataRoot
from eventstore.snapshots import SnapshotStore

_OLD_NS = 1_700_000_000 * 10**9


class _Clock:
    """Old, distinct modification times: every change "happened" long enough ago for the scan
    to trust it, and no two changes share a tick (the one case no mtime-based scan can see)."""

    def __init__(self) -> None:
        self.tick = 0

    def age(self, ws: Path) -> None:
        for path in [ws, *ws.rglob("*")]:
            st = path.lstat()
            if st.st_mtime_ns > _OLD_NS + 10**15:  # touched since the last ageing
                self.tick += 1
                ns = _OLD_NS + self.tick * 10**9
                os.utime(path, ns=(ns, ns), follow_symlinks=False)


def _scan(ws: Path, cache: ScanCache | None = None) -> tuple[dict[str, str], list[str]]:
    manifest = scan_workspace(ws, None, SnapshotSettings(max_file_bytes=64), cache=cache).manifest
    return {p: e.hash for p, e in manifest.files.items()}, manifest.skipped


NAMES = st.sampled_from(["a", "b", "c.log", "d.py"])
DIRS = st.sampled_from(["", "x/", "x/y/", "z/"])
OPS = st.one_of(
    st.tuples(st.just("write"), DIRS, NAMES, st.binary(max_size=80)),
    st.tuples(st.just("delete"), DIRS, NAMES, st.just(b"")),
    st.tuples(st.just("rmdir"), DIRS, st.just(""), st.just(b"")),
    st.tuples(
        st.just("ignore"), DIRS, st.sampled_from(["*.log", "b", "y/", "!c.log", ""]), st.just(b"")
    ),
    st.tuples(st.just("link"), DIRS, NAMES, st.just(b"")),
)


def _apply(ws: Path, op: tuple[str, str, str, bytes]) -> None:
    kind, directory, name, data = op
    where = ws / directory
    if kind == "rmdir":
        if directory:
            shutil.rmtree(where, ignore_errors=True)
        return
    where.mkdir(parents=True, exist_ok=True)
    target = where / name
    if kind == "write":
        if target.is_symlink():
            target.unlink()
        target.write_bytes(data)
    elif kind == "delete":
        if target.is_symlink() or target.is_file():
            target.unlink()
    elif kind == "ignore":
        (where / ".gitignore").write_text(f"{name}\n")
    elif kind == "link" and not target.exists() and not target.is_symlink():
        target.symlink_to("a")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=st.lists(OPS, min_size=1, max_size=12))
def test_r_snap_1_a_cached_scan_finds_what_a_fresh_scan_finds(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, str, str, bytes]]
) -> None:
    ws = tmp_path_factory.mktemp("ws")
    clock, cache = _Clock(), ScanCache()
    for op in ops:
        _apply(ws, op)
        clock.age(ws)
        assert _scan(ws, cache) == _scan(ws), op


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=st.lists(OPS, min_size=1, max_size=10))
def test_r_snap_1_trees_made_from_reused_directories_equal_trees_made_afresh(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, str, str, bytes]]
) -> None:
    """A session's scans hand the store their directories (unchanged ones as the same objects);
    each snapshot id equals the id a new store gives the same manifest, and reads back whole.
    The manifest itself, which the scan builds by rewriting only the directories that changed
    since ``previous``, equals a fresh scan's: files, and the capped files in walk order."""
    base = tmp_path_factory.mktemp("snap")
    ws = base / "ws"
    ws.mkdir()
    settings_ = SnapshotSettings(max_file_bytes=64)
    store = SnapshotStore(DataRoot(base / "home"), project="p", agent="a")
    clock, cache = _Clock(), ScanCache()
    previous = None
    for n, op in enumerate(ops):
        _apply(ws, op)
        clock.age(ws)
        result = scan_workspace(ws, store, settings_, previous, cache=cache)
        assert result.manifest == scan_workspace(ws, None, settings_).manifest, op
        snapshot_id = store.put_manifest(result.manifest, groups=result.groups)
        other = SnapshotStore(DataRoot(base / f"home{n}"), project="p", agent="a")
        assert other.put_manifest(scan_workspace(ws, other, settings_).manifest) == snapshot_id
        back = store.read_manifest(snapshot_id)
        assert back.files == result.manifest.files
        assert sorted(back.skipped) == sorted(result.manifest.skipped)
        previous = result.manifest


def test_r_snap_1_a_trusted_listing_is_not_listed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    for d in ("p", "q", "q/r"):
        (ws / d).mkdir(parents=True)
        (ws / d / "f.txt").write_text(d)
    _Clock().age(ws)
    cache = ScanCache()
    first = _scan(ws, cache)
    listed: list[str] = []
    real = os.scandir

    def counting(path: str) -> object:
        listed.append(str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", counting)
    (ws / "q" / "f.txt").write_text("changed, same directory")
    assert _scan(ws, cache)[0]["q/f.txt"] != first[0]["q/f.txt"]
    assert listed == []  # a file's change does not touch its directory's listing
    (ws / "q" / "new.txt").write_text("new")
    assert "q/new.txt" in _scan(ws, cache)[0]  # just modified: listed again, not trusted
    assert listed == [str(ws / "q")]


def test_r_snap_1_a_session_scan_rewrites_only_changed_directories(tmp_path: Path) -> None:
    """With ``previous`` the cache's last manifest, unchanged directories keep their group
    objects (the store's trees are reused) and still report their capped files; a changed,
    emptied or removed directory is rewritten in the manifest."""
    ws = tmp_path / "ws"
    for d in ("big", "p", "q"):
        (ws / d).mkdir(parents=True)
        (ws / d / "f.txt").write_text(d)
    (ws / "big" / "large.bin").write_bytes(b"x" * 100)
    clock = _Clock()
    clock.age(ws)
    settings_ = SnapshotSettings(max_file_bytes=64)
    cache = ScanCache()
    first = scan_workspace(ws, None, settings_, cache=cache)
    assert first.manifest.skipped == ["big/large.bin"]
    (ws / "p" / "f.txt").write_text("changed")
    shutil.rmtree(ws / "q")
    clock.age(ws)
    second = scan_workspace(ws, None, settings_, first.manifest, cache=cache)
    assert second.groups is not None and first.groups is not None
    assert second.groups["big"] is first.groups["big"]
    assert second.groups["p"] is not first.groups["p"]
    assert "q" not in second.groups
    assert second.manifest == scan_workspace(ws, None, settings_).manifest
    assert second.manifest.skipped == ["big/large.bin"]
    assert sorted(second.manifest.files) == ["big/f.txt", "p/f.txt"]


def test_r_snap_1_an_ancestor_gitignore_change_reaches_cached_subdirectories(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    (ws / "a" / "b").mkdir(parents=True)
    (ws / "a" / "b" / "out.log").write_text("log")
    (ws / "a" / "b" / "keep.py").write_text("py")
    (ws / ".gitignore").write_text("nothing\n")
    clock = _Clock()
    clock.age(ws)
    cache = ScanCache()
    assert sorted(_scan(ws, cache)[0]) == [".gitignore", "a/b/keep.py", "a/b/out.log"]
    (ws / ".gitignore").write_text("*.log\n")  # the subdirectories' own mtimes do not move
    clock.age(ws)
    assert sorted(_scan(ws, cache)[0]) == [".gitignore", "a/b/keep.py"]


def test_r_snap_1_a_small_unchanged_workspace_is_scanned_without_a_thread_hop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hashing never runs on the event loop; a small workspace's walk does (a worker thread's
    round trip cost more than the walk and split a turn's records into two bursts)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a")
    _Clock().age(ws)
    snaps = Snapshots.of(SnapshotSettings(), DataRoot(tmp_path / "home"), "p", "a", ws)
    assert snaps is not None
    hops: list[object] = []
    real = anyio.to_thread.run_sync

    async def counting(fn: object, *args: object, **kw: object) -> object:
        hops.append(fn)
        return await real(fn, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(anyio.to_thread, "run_sync", counting)
    records: list[object] = []

    async def take(expect_hops: int) -> None:
        await snaps.take(records.append)
        assert len(hops) == expect_hops

    anyio.run(take, 1)  # the first scan: size unknown, in a thread
    anyio.run(take, 1)  # small and unchanged: on the loop
    (ws / "a.txt").write_text("changed")
    anyio.run(take, 2)  # a file to hash: in a thread
    assert len(records) == 3
