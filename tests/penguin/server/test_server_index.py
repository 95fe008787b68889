"""The index catches up incrementally (R-SRV-10, R-SRV-13): folding only what each refresh
finds appended gives the rows a fresh index gives over the finished files, whatever the byte
boundaries the appends fell on (mid-line included), and a rewritten file is folded again."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
from soupkit import SESSIONS

from eventstore import DataRoot
from penguin._index import Index

_NAME = re.compile(r"(session-[\w-]+?)_(\d+)\.jsonl")
CASES = {name: files for name, files in SESSIONS.items() if _NAME.fullmatch(files[0].name)}


def _rows(index: Index) -> tuple[Any, ...]:
    every = index.errors(start=None, end=None, session=None)
    return index.session_rows(), index.usage_rows(), every


def _layout(root: DataRoot, files: list[Path]) -> list[tuple[Path, bytes]]:
    out = []
    for f in files:
        m = _NAME.fullmatch(f.name)
        assert m is not None
        dest = root.trace_path(m.group(1), int(m.group(2)), date="2026-07-18")
        root.ensure_dir(dest.parent)
        out.append((dest, f.read_bytes()))
    return out


def _fresh(tmp: Path, files: list[Path]) -> tuple[Any, ...]:
    root = DataRoot(tmp)
    for dest, data in _layout(root, files):
        dest.write_bytes(data)
    index = Index(root)
    try:
        index.refresh()
        return _rows(index)
    finally:
        index.close()


@pytest.mark.parametrize("name", sorted(CASES))
def test_r_srv_13_appends_folded_piecewise_equal_a_fresh_fold(tmp_path: Path, name: str) -> None:
    files = CASES[name]
    root = DataRoot(tmp_path / "live")
    index = Index(root)
    try:
        for dest, data in _layout(root, files):
            # Cuts at 1/7, 3/7, 5/7 of the file land mid-line in every stored trace.
            cuts = [0, *(len(data) * k // 7 for k in (1, 3, 5)), len(data)]
            for a, b in itertools.pairwise(cuts):
                with dest.open("ab") as out:
                    out.write(data[a:b])
                index.refresh()
        live = _rows(index)
    finally:
        index.close()
    assert live == _fresh(tmp_path / "fresh", files)
    assert live[0], "the session has a row"


def test_r_srv_13_a_rewritten_file_is_folded_again(tmp_path: Path) -> None:
    files = CASES["traces/compaction_summarize"]
    root = DataRoot(tmp_path / "live")
    index = Index(root)
    try:
        ((dest, data),) = _layout(root, files[:1])
        dest.write_bytes(data)
        index.refresh()
        lines = data.splitlines(keepends=True)
        # Same path, new file (as a repair tool's atomic rename makes it), more bytes than before.
        tmp = dest.with_suffix(".tmp")
        tmp.write_bytes(b"".join(lines[: len(lines) // 2]) + b"\n" * len(data))
        tmp.replace(dest)
        index.refresh()
        live = _rows(index)
    finally:
        index.close()
    fresh_root = tmp_path / "fresh"
    ((fdest, _),) = _layout(DataRoot(fresh_root), files[:1])
    fdest.write_bytes(dest.read_bytes())
    fresh = Index(DataRoot(fresh_root))
    try:
        fresh.refresh()
        assert live == _rows(fresh)
    finally:
        fresh.close()


def test_r_srv_13_a_new_directory_wakes_the_watcher(tmp_path: Path) -> None:
    """A CLI run creates its session directories and writes its trace in one go; inotify watches
    a new directory only after its creation is seen, so the trace's own events can be lost (a
    rare "appears within 2 s" failure under load).  A directory's creation must trigger a
    refresh, which walks the root; other files (locks, sidecars) must not."""
    from watchfiles import Change

    from penguin.server._watch import _is_trace

    new_dir = tmp_path / "proj" / "agent"
    new_dir.mkdir(parents=True)
    assert _is_trace(Change.added, str(new_dir))
    assert _is_trace(Change.modified, str(new_dir / "s_001.jsonl"))
    lock = new_dir / "s.lock"
    lock.write_text("")
    assert not _is_trace(Change.added, str(lock))
    assert not _is_trace(Change.added, str(new_dir / "s.summaries"))
    assert not _is_trace(Change.deleted, str(tmp_path / "gone"))
