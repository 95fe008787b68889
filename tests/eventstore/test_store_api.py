"""The store's disk API (issue 28): ``probe_lock``, ``write_private`` / ``create_private``,
``tail`` and ``DataRoot.delete_session`` (R-TRACE-18, R-ROOT-9, R-FORK-1, §4.5)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from eventstore import (
    DataRoot,
    SessionLocked,
    TraceWriter,
    create_private,
    encode_line,
    lock_path_of,
    probe_lock,
    read_trace,
    tail,
    write_private,
)
from eventstore import builders as b

TS = "2026-03-01T10:00:00.000Z"
SID = "session-2026-03-01-10-00-00-0a1b2c3d"
DATE = "2026-03-01"

HOLDER = """
import sys
from eventstore import TraceWriter
w = TraceWriter(sys.argv[1], fsync="never")
print("ready", flush=True)
sys.stdin.read()
"""


def _meta() -> bytes:
    return encode_line(
        b.session_meta(
            session_id=SID,
            provider="scripted",
            model_id="demo",
            model_context_window=1000,
            system_prompt="p",
            agent_state="/s",
            workspace="/w",
            timestamp=TS,
        )
    )


def _text(words: str) -> bytes:
    return encode_line(b.user_text(words, timestamp=TS))


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[Path]:
    """Another process holding a writer on ``<tmp>/s_001.jsonl``; yields the lock path."""
    trace = tmp_path / "s_001.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(trace)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    try:
        assert proc.stdout.readline() == "ready\n"
        yield lock_path_of(trace)
    finally:
        proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()


# --------------------------------------------------------------------------- probe_lock


def test_probe_lock_sees_another_process_holding_the_lock_r_trace_18(holder: Path) -> None:
    probe = probe_lock(holder)
    assert probe.held and probe.holder_pid is not None and probe.holder_pid != os.getpid()


def test_probe_lock_follows_the_lock_not_the_pid_r_trace_18(tmp_path: Path) -> None:
    """A closed writer leaves its (still living) pid in the file: the lock is free."""
    trace = tmp_path / "s_001.jsonl"
    writer = TraceWriter(trace, fsync="never")
    assert probe_lock(lock_path_of(trace)).held  # a writer of this very process counts
    assert probe_lock(lock_path_of(trace)).holder_pid == os.getpid()
    writer.close()
    assert lock_path_of(trace).read_text().strip() == str(os.getpid())
    assert not probe_lock(lock_path_of(trace)).held


def test_a_probe_releases_the_lock_and_creates_no_lock_file(tmp_path: Path) -> None:
    """The probe leaves the lock as it found it: a writer opens right after, and a probe of a
    missing lock file creates none."""
    trace = tmp_path / "s_001.jsonl"
    assert not probe_lock(lock_path_of(trace)).held
    assert not lock_path_of(trace).exists()
    TraceWriter(trace, fsync="never").close()
    assert not probe_lock(lock_path_of(trace)).held
    TraceWriter(trace, fsync="never").close()


def test_probe_lock_refuses_a_symlinked_lock_r_root_9(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").write_text("1\n")
    (tmp_path / "s.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="symlinked"):
        probe_lock(tmp_path / "s.lock")


def test_lock_path_of_names_the_lock_beside_a_trace_file(tmp_path: Path) -> None:
    assert lock_path_of(tmp_path / f"{SID}_002.jsonl") == tmp_path / f"{SID}.lock"
    with pytest.raises(ValueError, match="not a trace file name"):
        lock_path_of(tmp_path / "notes.txt")


# --------------------------------------------------------------------------- private files


def test_write_private_is_0600_whatever_the_umask_r_root_9(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        path = write_private(tmp_path / "new" / "token", b"secret\n")
    finally:
        os.umask(old)
    assert path.read_bytes() == b"secret\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    write_private(path, b"again\n", sync=True)
    assert path.read_bytes() == b"again\n"
    assert [p.name for p in path.parent.iterdir()] == ["token"]  # no temporary left behind


def test_write_private_replaces_a_dangling_symlink_never_writes_its_target(tmp_path: Path) -> None:
    target = tmp_path / "planted-target"
    link = tmp_path / "token"
    link.symlink_to(target)
    write_private(link, b"secret\n")
    assert not target.exists()
    assert not link.is_symlink() and link.read_bytes() == b"secret\n"


def test_write_private_replaces_a_symlink_to_a_file_and_leaves_the_file(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    (tmp_path / "config").symlink_to(victim)
    write_private(tmp_path / "config", b"new")
    assert victim.read_bytes() == b"keep"
    assert (tmp_path / "config").read_bytes() == b"new"


def test_create_private_is_exclusive_and_refuses_any_symlink(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        with create_private(tmp_path / "a" / "out.jsonl") as f:
            f.write(b"x\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a" / "out.jsonl").stat().st_mode) == 0o600
    with pytest.raises(FileExistsError):
        create_private(tmp_path / "a" / "out.jsonl")
    (tmp_path / "dangling").symlink_to(tmp_path / "planted")
    with pytest.raises(FileExistsError):
        create_private(tmp_path / "dangling")
    assert not (tmp_path / "planted").exists()


# --------------------------------------------------------------------------- tail


def test_tail_reads_positions_and_continues_where_it_stopped_r_fork_1(tmp_path: Path) -> None:
    path = tmp_path / f"{SID}_002.jsonl"
    two = _text("two")
    path.write_bytes(b"\xef\xbb\xbf" + _meta() + b"\n" + _text("one") + two[:9])
    r = tail(path)
    assert [(t.file, t.ordinal, t.line) for t in r.records] == [(2, 0, 1), (2, 1, 3)]
    assert r.records[0].end_offset == 3 + len(_meta())
    assert r.records[1].end_offset == r.offset == 3 + len(_meta()) + 1 + len(_text("one"))
    assert r.diagnostics == []
    # The unterminated line was not consumed: once it ends, the next read starts with it.
    with path.open("ab") as f:
        f.write(two[9:] + b"not json\n" + _text("three"))
    again = r.more()
    assert [(t.ordinal, t.line) for t in again.records] == [(2, 4), (3, 6)]
    assert [(d.line, d.kind) for d in again.diagnostics] == [(5, "malformed")]
    assert again.offset == path.stat().st_size == again.records[-1].end_offset
    assert again.more().records == []


def test_tail_ordinals_agree_with_read_trace(tmp_path: Path) -> None:
    path = tmp_path / f"{SID}_001.jsonl"
    lines = [_meta(), b"\n", b"  \n", b"{bad\n", _text("a"), b" " + _text("b"), _text("c")[:-1]]
    path.write_bytes(b"".join(lines))
    records = read_trace(path, report=False).records
    assert [t.record for t in tail(path).records] == records[: len(tail(path).records)]
    assert len(tail(path).records) == len(records) == 3


@pytest.mark.parametrize("chunk", [1 << 20, 64])
def test_tail_skips_an_over_long_line_without_losing_its_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """R-TRACE-17, in one read and across reads of a small chunk."""
    monkeypatch.setattr("eventstore._tail._CHUNK", chunk)
    path = tmp_path / f"{SID}_001.jsonl"
    path.write_bytes(_meta() + b"x" * 3000 + b"\n" + _text("after"))
    r = tail(path, max_line_bytes=1000)
    assert [(t.ordinal, t.line) for t in r.records] == [(0, 1), (1, 3)]
    assert [(d.line, d.kind) for d in r.diagnostics] == [(2, "malformed")]
    assert r.offset == path.stat().st_size


def test_tail_of_a_shorter_file_yields_nothing_and_keeps_the_cursor(tmp_path: Path) -> None:
    path = tmp_path / f"{SID}_001.jsonl"
    path.write_bytes(_meta())
    r = tail(path)
    path.write_bytes(b"")
    again = r.more()
    assert again.records == [] and (again.offset, again.ordinal) == (r.offset, 1)


# --------------------------------------------------------------------------- delete_session


def _session(root: DataRoot) -> list[Path]:
    files = []
    for index in (1, 2):
        path = root.trace_path(SID, index, date=DATE)
        root.ensure_dir(path.parent)
        path.write_bytes(_meta() + _text(f"file {index}"))
        files.append(path)
    TraceWriter(files[-1], fsync="never").close()  # leaves the lock file
    files[0].with_name(f"{SID}.summaries").write_bytes(b"{}")
    pad = root.scratchpad(SID)
    pad.mkdir(parents=True)
    (pad / "GOAL.yaml").write_text("status: active\n")
    return files


def test_delete_session_removes_files_sidecar_lock_and_scratchpad(tmp_path: Path) -> None:
    root = DataRoot(tmp_path)
    files = _session(root)
    removed = root.delete_session(SID)
    lock = lock_path_of(files[0])
    assert set(removed) == {
        *files,
        files[0].with_name(f"{SID}.summaries"),
        lock,
        root.scratchpad(SID),
    }
    assert not any(p.exists() for p in removed)
    with pytest.raises(FileNotFoundError):
        root.delete_session(SID)
    assert root.delete_session(SID, missing_ok=True) == []


def test_delete_session_refuses_a_session_a_writer_holds(tmp_path: Path) -> None:
    root = DataRoot(tmp_path)
    files = _session(root)
    writer = TraceWriter(files[-1], fsync="never")
    try:
        with pytest.raises(SessionLocked):
            root.delete_session(SID)
        assert all(p.exists() for p in files) and root.scratchpad(SID).is_dir()
    finally:
        writer.close()
