"""One writer per session: the ``flock`` on ``<session_id>.lock`` (R-TRACE-18, R-TRACE-18a)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from eventstore import SessionLocked, TraceWriteError, TraceWriter
from eventstore import builders as b

TS = "2026-03-01T10:00:00.000Z"

# Holds a writer on argv[1] until its stdin closes (or it is killed).
HOLDER = """
import sys
from eventstore import TraceWriter
w = TraceWriter(sys.argv[1], fsync="never")
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path / "s_001.jsonl")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline() == "ready\n"
        yield proc
    finally:
        proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()


def open_when_free(path: Path, *, within: float = 5.0) -> TraceWriter:
    """Poll until the lock is free (a dead holder's lock goes with its process)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return TraceWriter(path, fsync="never")
        except SessionLocked:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def test_second_process_gets_session_locked_naming_the_holder_r_trace_18(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    """A second writer fails at once with the session and the holder's pid; once the holder is
    killed, a new writer opens (R-TRACE-18: a crashed holder never blocks a resume)."""
    path = tmp_path / "s_001.jsonl"
    with pytest.raises(SessionLocked) as info:
        TraceWriter(path, fsync="never")
    err = info.value
    assert (err.session_id, err.holder_pid, err.path) == ("s", holder.pid, tmp_path / "s.lock")
    assert str(holder.pid) in str(err)

    holder.kill()
    holder.wait()
    with open_when_free(path) as w:
        w.append(b.user_text("after the crash", timestamp=TS))
        assert (tmp_path / "s.lock").read_text() == f"{os.getpid()}\n"


def test_second_writer_in_the_same_process_is_refused_r_trace_18(tmp_path: Path) -> None:
    """``flock`` (not ``lockf``) also excludes a second writer of this process; any file of the
    session shares the one lock; closing releases it and the lock file stays (R-TRACE-18a)."""
    first = TraceWriter(tmp_path / "s_001.jsonl", fsync="never")
    for other in ("s_001.jsonl", "s_002.jsonl"):
        with pytest.raises(SessionLocked) as info:
            TraceWriter(tmp_path / other, fsync="never")
        assert info.value.holder_pid == os.getpid()
        assert info.value.session_id == "s"
    assert not (tmp_path / "s_002.jsonl").exists()
    first.close()
    with TraceWriter(tmp_path / "s_002.jsonl", fsync="never"):
        pass
    assert (tmp_path / "s.lock").exists()


def test_explicit_lock_path_and_session_id(tmp_path: Path) -> None:
    lock = tmp_path / "locks" / "custom.lock"
    with TraceWriter(tmp_path / "t_001.jsonl", fsync="never", lock_path=lock, session_id="sess"):
        with pytest.raises(SessionLocked) as info:
            TraceWriter(tmp_path / "u_001.jsonl", fsync="never", lock_path=lock)
        assert (info.value.session_id, info.value.path) == ("u", lock)
        # A different lock file is a different session.
        with TraceWriter(tmp_path / "t_002.jsonl", fsync="never", session_id="other"):
            pass
    assert not (tmp_path / "u_001.jsonl").exists()


def test_holder_pid_is_none_when_the_lock_file_holds_no_pid(tmp_path: Path) -> None:
    with TraceWriter(tmp_path / "s_001.jsonl", fsync="never"):
        (tmp_path / "s.lock").write_text("garbage")
        with pytest.raises(SessionLocked) as info:
            TraceWriter(tmp_path / "s_001.jsonl", fsync="never")
        assert info.value.holder_pid is None
        assert "another process" in str(info.value)


def test_a_failed_constructor_releases_the_lock(tmp_path: Path) -> None:
    """A writer whose trace file cannot be opened does not keep the session lock."""
    (tmp_path / "s_001.jsonl").mkdir()
    with pytest.raises(TraceWriteError, match="cannot open"):
        TraceWriter(tmp_path / "s_001.jsonl", fsync="never")
    with TraceWriter(tmp_path / "s_002.jsonl", fsync="never"):
        pass
