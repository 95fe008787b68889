"""TraceWriter: round trip, single write, concurrency, permissions, limits, rotation, fsync policy
and fault injection at the ``os`` seam (SPEC §4.3–§4.4, R-ROOT-9/10, R-TRACE-4…17)."""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from eventstore import (
    Diagnostic,
    OmniMessage,
    RecordTooLarge,
    TokenCounts,
    ToolDefinition,
    TraceWriteError,
    TraceWriter,
    UnknownPayload,
    decode,
    encode,
    encode_line,
)
from eventstore import builders as b

TS = "2026-03-01T10:00:00.000Z"


# ---------------------------------------------------------------------------- helpers


def lines_of(path: Path) -> list[bytes]:
    """The file's complete lines; fails if the file has a torn tail."""
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), "file ends with a torn line"
    return data.split(b"\n")[:-1]


def records(path: Path) -> list[OmniMessage]:
    return [decode(line) for line in lines_of(path)]


def meta(session_id: str = "s") -> OmniMessage:
    return b.session_meta(
        session_id=session_id,
        provider="scripted",
        model_id="m1",
        model_context_window=1000,
        system_prompt="be brief",
        agent_state="",
        workspace="/w",
        timestamp=TS,
    )


def tools_ready() -> OmniMessage:
    return b.tool_list_ready([ToolDefinition(name="bash", description="run")], timestamp=TS)


def head() -> list[OmniMessage]:
    return [meta(), tools_ready()]


def texts(path: Path) -> list[str]:
    """The text of every text record (other records as their payload type)."""
    out: list[str] = []
    for rec in records(path):
        body = getattr(rec.payload, "text", None)
        out.append(body if isinstance(body, str) else type(rec.payload).__name__)
    return out


class SyscallLog:
    """Wraps one ``os`` function: counts calls and lets a test script a fault per call."""

    def __init__(self, real: Callable[..., Any]) -> None:
        self.real = real
        self.calls: list[tuple[Any, ...]] = []
        self.script: list[Callable[..., Any]] = []

    def __call__(self, *args: Any) -> Any:
        self.calls.append(args)
        if self.script:
            return self.script.pop(0)(*args)
        return self.real(*args)


def raising(code: int) -> Callable[..., Any]:
    def fail(*args: Any) -> Any:
        raise OSError(code, os.strerror(code))

    return fail


@pytest.fixture
def seam(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], SyscallLog]:
    """``seam("write")`` replaces ``os.write`` (the writer's seam) with a SyscallLog."""

    def install(name: str) -> SyscallLog:
        log = SyscallLog(getattr(os, name))
        monkeypatch.setattr(os, name, log)
        return log

    return install


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    return tmp_path / "s_001.jsonl"


# ---------------------------------------------------------------------------- round trip


def sample_records() -> list[OmniMessage]:
    counts = TokenCounts(cache_read=1, cache_write=2, output=3, total=6)
    return [
        meta(),
        tools_ready(),
        b.user_text('héllo "quoted" \\ back\nslash \u2603 \U0001f427', timestamp=TS),
        b.request_begin(timestamp=TS),
        b.thinking("hmm", timestamp=TS),
        b.assistant_text("hi", fidelity={"k": [1, {"n": None}]}, timestamp=TS),
        b.tool_call("bash", {"cmd": "ls"}, "call_1", timestamp=TS),
        b.request_end("completed", timestamp=TS),
        b.token_usage(counts, timestamp=TS),
        b.tool_call_output("call_1", "a\tb\x00c", timestamp=TS),
        b.approval_decision("allow", "call_1", timestamp=TS),
        b.compaction_begin("manual", "discard", context=10, turns=1, timestamp=TS),
        b.compaction_end("manual", "discard", "completed", timestamp=TS),
        b.abort(None, timestamp=TS),
        OmniMessage(TS, "event_msg", UnknownPayload({"type": "future_event", "x": [1, 2]})),
    ]


def test_round_trip_one_line_per_record_r_trace_11(trace: Path) -> None:
    """What is appended reads back via decode, exactly, one line per record (R-TRACE-11)."""
    msgs = sample_records()
    with TraceWriter(trace, fsync="never") as w:
        for m in msgs:
            w.append(m)
        assert w.offset == trace.stat().st_size
    assert lines_of(trace) == [encode(m) for m in msgs]
    assert records(trace) == msgs


def test_multi_mb_record_is_one_os_write_r_trace_11(
    trace: Path, seam: Callable[[str], SyscallLog]
) -> None:
    """A 5 MB record goes to the file in exactly one os.write call (R-TRACE-11)."""
    big = b.tool_call_output("call_big", "0123456789" * 500_000, timestamp=TS)
    small = b.user_text("after", timestamp=TS)
    with TraceWriter(trace, fsync="never") as w:
        writes = seam("write")
        w.append(big)
        assert len(writes.calls) == 1
        assert len(writes.calls[0][1]) == len(encode_line(big)) > 5_000_000
        w.append(small)
        assert len(writes.calls) == 2
    assert records(trace) == [big, small]


def test_appends_continue_an_existing_file(trace: Path) -> None:
    """A reopened clean file is appended to, not rewritten (R-TRACE-3); no diagnostics."""
    with TraceWriter(trace, fsync="never") as w:
        w.append(b.user_text("one", timestamp=TS))
    with TraceWriter(trace, fsync="never") as w:
        assert w.diagnostics == []
        assert w.offset == trace.stat().st_size
        w.append(b.user_text("two", timestamp=TS))
    assert texts(trace) == ["one", "two"]


def test_closed_writer_refuses_appends_and_close_is_idempotent(trace: Path) -> None:
    with TraceWriter(trace, fsync="turn") as w:
        w.append(b.user_text("x", timestamp=TS))
    assert w.closed
    w.close()
    with pytest.raises(TraceWriteError, match="closed"):
        w.append(b.user_text("y", timestamp=TS))
    assert texts(trace) == ["x"]


# ---------------------------------------------------------------------------- concurrency


@pytest.mark.anyio
async def test_threads_and_tasks_interleave_whole_lines_r_trace_12(trace: Path) -> None:
    """Threads and anyio tasks append thousands of records while another thread appends a 5 MB
    record: every line decodes, every record is there once, each producer's order is kept."""
    n_threads, n_tasks, per = 4, 4, 1000
    big_body = "B" * (5 * 2**20)
    w = TraceWriter(trace, fsync="never")
    go = threading.Event()

    def thread_producer(k: int) -> None:
        go.wait()
        for i in range(per):
            w.append(b.user_text(f"thread{k}:{i}", timestamp=TS))

    def big_producer() -> None:
        go.wait()
        w.append(b.tool_call_output("big", big_body, timestamp=TS))

    async def task_producer(k: int) -> None:
        for i in range(per):
            w.append(b.user_text(f"task{k}:{i}", timestamp=TS))
            if i % 25 == 0:
                await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        for k in range(n_threads):
            tg.start_soon(anyio.to_thread.run_sync, thread_producer, k)
        tg.start_soon(anyio.to_thread.run_sync, big_producer)
        for k in range(n_tasks):
            tg.start_soon(task_producer, k)
        go.set()
    w.close()

    seen: dict[str, list[int]] = {}
    bigs = 0
    for rec in records(trace):
        if rec.payload == b.tool_call_output("big", big_body).payload:
            bigs += 1
            continue
        producer, _, i = rec.payload.text.partition(":")  # type: ignore[union-attr]
        seen.setdefault(producer, []).append(int(i))
    assert bigs == 1
    assert sorted(seen) == sorted(
        [f"thread{k}" for k in range(n_threads)] + [f"task{k}" for k in range(n_tasks)]
    )
    for order in seen.values():
        assert order == list(range(per))


# ---------------------------------------------------------------------------- permissions


@pytest.fixture
def umask() -> Iterator[Callable[[int], None]]:
    old = os.umask(0o022)
    os.umask(old)

    def set_mask(mask: int) -> None:
        os.umask(mask)

    try:
        yield set_mask
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask", [0o000, 0o077, 0o277])
def test_files_0600_dirs_0700_whatever_the_umask_r_root_9(
    tmp_path: Path, umask: Callable[[int], None], mask: int
) -> None:
    """Every directory the writer creates is 0700, every trace and lock file 0600 (R-ROOT-9)."""
    path = tmp_path / "proj" / "traces" / "2026-03-01" / "s_001.jsonl"
    umask(mask)
    with TraceWriter(path, fsync="never") as w:
        w.append(b.user_text("x", timestamp=TS))
        rotated = w.rotate()
    umask(0o022)
    for d in (tmp_path / "proj", tmp_path / "proj" / "traces", path.parent):
        assert mode(d) == 0o700, d
    for f in (path, rotated, path.parent / "s.lock"):
        assert mode(f) == 0o600, f


# ---------------------------------------------------------------------------- refusals


def test_record_too_large_writes_nothing_r_trace_17(trace: Path) -> None:
    """Over ``max_record_bytes``: RecordTooLarge naming size and limit; nothing is written and the
    writer stays usable (R-TRACE-17)."""
    big = b.user_text("x" * 600, timestamp=TS)
    with TraceWriter(trace, fsync="never", max_record_bytes=500) as w:
        w.append(b.user_text("before", timestamp=TS))
        size = trace.stat().st_size
        with pytest.raises(RecordTooLarge) as info:
            w.append(big)
        assert (info.value.size, info.value.limit, info.value.path) == (
            len(encode_line(big)),
            500,
            trace,
        )
        assert trace.stat().st_size == size == w.offset
        w.append(b.user_text("after", timestamp=TS))
    assert texts(trace) == ["before", "after"]


def test_record_at_the_limit_is_written(trace: Path) -> None:
    msg = b.user_text("x" * 100, timestamp=TS)
    with TraceWriter(trace, fsync="never", max_record_bytes=len(encode_line(msg))) as w:
        w.append(msg)
    assert records(trace) == [msg]


@pytest.mark.parametrize("limit", [0, 256 * 2**20 + 1])
def test_max_record_bytes_out_of_range_is_refused_r_trace_17(trace: Path, limit: int) -> None:
    with pytest.raises(ValueError, match="max_record_bytes"):
        TraceWriter(trace, max_record_bytes=limit)
    assert not trace.exists()


def test_unknown_fsync_policy_is_refused(trace: Path) -> None:
    with pytest.raises(ValueError, match="fsync"):
        TraceWriter(trace, fsync="sometimes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "msg",
    [
        b.partial_text("delta", "he", timestamp=TS),
        b.partial_tool_call("start", "call_1", name="bash", timestamp=TS),
        b.partial_tool_call_output("delta", "call_1", "out", timestamp=TS),
        b.tool_call_output("call_1", "out", origin=["sub-1"], timestamp=TS),
    ],
    ids=["partial_text", "partial_tool_call", "partial_output", "origin"],
)
def test_partial_or_origin_tagged_is_refused_r_trace_4(trace: Path, msg: OmniMessage) -> None:
    """R-TRACE-4: a partial or origin-tagged message raises ValueError and writes nothing."""
    with TraceWriter(trace, fsync="never") as w:
        with pytest.raises(ValueError, match="R-TRACE-4"):
            w.append(msg)
        w.append(b.user_text("ok", timestamp=TS))
    assert texts(trace) == ["ok"]


# ---------------------------------------------------------------------------- rotation


def rotate_with_head(w: TraceWriter) -> Path:
    """What the engine does: rotate, then append the new file's head (R-TRACE-8/9)."""
    path = w.rotate()
    for msg in head():
        w.append(msg)
    return path


def test_rotation_splits_records_at_the_rotation_r_trace_8_10(tmp_path: Path) -> None:
    """Records before ``rotate`` land in the old file, the ones after it in the new file."""
    first = tmp_path / "s_001.jsonl"
    second = tmp_path / "s_002.jsonl"
    with TraceWriter(first, fsync="never") as w:
        w.append(meta())
        w.append(b.compaction_end("context", "discard", "completed", timestamp=TS))
        assert rotate_with_head(w) == second
        w.append(b.user_text("after", timestamp=TS))
        assert w.path == second
    assert texts(first) == ["SessionMetaPayload", "CompactionEndPayload"]
    assert records(second) == [*head(), b.user_text("after", timestamp=TS)]


def test_rotate_pads_the_index_r_root_4(tmp_path: Path) -> None:
    """``rotate`` moves to ``_NNN+1`` (at least 3 digits)."""
    with TraceWriter(tmp_path / "s_998.jsonl", fsync="rotate") as w:
        assert w.rotate() == tmp_path / "s_999.jsonl"
        assert rotate_with_head(w) == tmp_path / "s_1000.jsonl"
        assert w.offset == sum(len(encode_line(m)) for m in head())
        w.append(b.user_text("x", timestamp=TS))
    assert records(tmp_path / "s_1000.jsonl") == [*head(), b.user_text("x", timestamp=TS)]
    assert not (tmp_path / "s_998.jsonl").read_bytes()


def test_rotation_without_head_starts_an_empty_file(tmp_path: Path) -> None:
    with TraceWriter(tmp_path / "abc-1_001.jsonl", fsync="never") as w:
        new = w.rotate()
        assert (new.name, w.path, w.offset) == ("abc-1_002.jsonl", new, 0)
    assert new.read_bytes() == b""


def test_name_without_index_cannot_rotate(tmp_path: Path) -> None:
    """A writer on a file without ``_NNN`` works, with its lock next to it, but cannot rotate."""
    with TraceWriter(tmp_path / "plain.jsonl", fsync="never") as w:
        w.append(b.user_text("x", timestamp=TS))
        with pytest.raises(ValueError, match="rotate"):
            w.rotate()
    assert (tmp_path / "plain.lock").exists()


@pytest.mark.parametrize(
    "residue",
    [
        b"",
        b'{"timestamp":"2026-03-01T10:00',
        encode_line(meta()) + encode_line(tools_ready()),
        encode_line(meta()) + b'{"timestamp":',
    ],
    ids=["empty", "torn", "head-only", "head-and-torn"],
)
def test_rotation_reuses_a_crash_residue_file_r_root_10(tmp_path: Path, residue: bytes) -> None:
    """A target holding only crash residue (R-ROOT-10) is emptied and reused."""
    target = tmp_path / "s_002.jsonl"
    target.write_bytes(residue)
    with TraceWriter(tmp_path / "s_001.jsonl", fsync="turn") as w:
        w.append(b.user_text("old", timestamp=TS))
        rotate_with_head(w)
        w.append(b.user_text("new", timestamp=TS))
        assert w.path == target
    assert records(target) == [*head(), b.user_text("new", timestamp=TS)]


def test_rotation_refuses_a_target_with_records_r_root_10(tmp_path: Path) -> None:
    """Never append into another context's file: the rotation fails and the writer stays on
    its file, still usable."""
    target = tmp_path / "s_002.jsonl"
    content = encode_line(meta()) + encode_line(b.user_text("other context", timestamp=TS))
    target.write_bytes(content)
    with TraceWriter(tmp_path / "s_001.jsonl", fsync="never") as w:
        with pytest.raises(TraceWriteError, match="another context") as info:
            w.rotate()
        assert info.value.path == target
        assert (w.path, w.poisoned) == (tmp_path / "s_001.jsonl", False)
        w.append(b.user_text("still here", timestamp=TS))
    assert target.read_bytes() == content
    assert records(tmp_path / "s_001.jsonl") == [b.user_text("still here", timestamp=TS)]


# ---------------------------------------------------------------------------- fsync policy


def counting(log: SyscallLog, out: list[bool]) -> Callable[..., Any]:
    def call(fd: int) -> Any:
        out.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        return log.real(fd)

    return call


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        # (dir fsyncs, file fsyncs, fdatasyncs): 3 new entries = lock, file 1, file 2.
        ("never", (0, 0, 0)),
        ("rotate", (3, 2, 0)),
        ("turn", (3, 2, 3)),
        ("always", (3, 2, 8)),
    ],
)
def test_fsync_policy_r_trace_16(
    tmp_path: Path,
    seam: Callable[[str], SyscallLog],
    policy: Any,
    expected: tuple[int, int, int],
) -> None:
    """``turn`` datasyncs after request_end/abort/compaction_end; ``always`` after each record
    (head included); ``rotate`` and up fsync the old file at rotation and at close and the
    directory after creating a file (R-TRACE-16)."""
    fsync, fdatasync = seam("fsync"), seam("fdatasync")
    seen_fsync: list[bool] = []
    seen_datasync: list[bool] = []
    fsync.script = [counting(fsync, seen_fsync)] * 100
    fdatasync.script = [counting(fdatasync, seen_datasync)] * 100
    with TraceWriter(tmp_path / "s_001.jsonl", fsync=policy) as w:
        w.append(b.user_text("u", timestamp=TS))
        w.append(b.request_end("completed", timestamp=TS))
        w.append(b.abort("stop", timestamp=TS))
        w.append(b.compaction_end("turns", "discard", "completed", timestamp=TS))
        w.append(b.compaction_begin("turns", "discard", context=1, turns=1, timestamp=TS))
        w.rotate()
        w.append(meta())  # the new file's head
        w.append(b.assistant_text("a", timestamp=TS))
        w.append(b.token_usage(TokenCounts(), timestamp=TS))
    counts = (seen_fsync.count(True), seen_fsync.count(False), len(seen_datasync))
    assert counts == expected
    assert not any(seen_datasync)


def test_no_fsync_of_a_poisoned_writer_on_close(
    trace: Path, seam: Callable[[str], SyscallLog]
) -> None:
    """R-TRACE-16: no retrying fsync after a failure, not even at close."""
    w = TraceWriter(trace, fsync="always")
    datasync = seam("fdatasync")
    datasync.script = [raising(errno.EIO)]
    with pytest.raises(TraceWriteError):
        w.append(b.user_text("x", timestamp=TS))
    fsync = seam("fsync")
    w.close()
    assert fsync.calls == []


# ---------------------------------------------------------------------------- fault injection


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_write_error_leaves_the_file_unchanged_r_trace_15(
    trace: Path, seam: Callable[[str], SyscallLog], code: int
) -> None:
    """ENOSPC/EIO from os.write: TraceWriteError with errno and the record's start offset, the
    file as it was, and the writer works again once the fault is gone (R-TRACE-15)."""
    with TraceWriter(trace, fsync="never") as w:
        w.append(b.user_text("one", timestamp=TS))
        before = trace.read_bytes()
        writes = seam("write")
        writes.script = [raising(code)]
        with pytest.raises(TraceWriteError) as info:
            w.append(b.user_text("two", timestamp=TS))
        err = info.value
        assert isinstance(err, OSError)
        assert (err.errno, err.offset, err.path) == (code, len(before), trace)
        assert os.strerror(code) in str(err)
        assert trace.read_bytes() == before
        assert (w.poisoned, w.offset) == (False, len(before))
        w.append(b.user_text("three", timestamp=TS))
    assert texts(trace) == ["one", "three"]


def test_error_after_a_partial_write_truncates_back_r_trace_14(
    trace: Path, seam: Callable[[str], SyscallLog]
) -> None:
    """Part of the record reached the file, then ENOSPC: the fragment is cut off again."""
    with TraceWriter(trace, fsync="never") as w:
        w.append(b.user_text("one", timestamp=TS))
        before = trace.read_bytes()
        writes = seam("write")
        writes.script = [lambda fd, data: writes.real(fd, data[:40]), raising(errno.ENOSPC)]
        with pytest.raises(TraceWriteError) as info:
            w.append(b.user_text("two" * 50, timestamp=TS))
        assert (info.value.errno, info.value.offset) == (errno.ENOSPC, len(before))
        assert trace.read_bytes() == before
        w.append(b.user_text("three", timestamp=TS))
    assert texts(trace) == ["one", "three"]


def test_short_write_is_continued_to_a_whole_record_r_trace_11(
    trace: Path, seam: Callable[[str], SyscallLog]
) -> None:
    msg = b.user_text("x" * 1000, timestamp=TS)
    with TraceWriter(trace, fsync="never") as w:
        writes = seam("write")
        writes.script = [
            lambda fd, data: writes.real(fd, data[:100]),
            lambda fd, data: writes.real(fd, data[:1]),
        ]
        w.append(msg)
        assert len(writes.calls) == 3
        assert w.offset == len(encode_line(msg))
    assert records(trace) == [msg]


@pytest.mark.parametrize("first", [0, 64])
def test_write_without_progress_raises_r_trace_11(
    trace: Path, seam: Callable[[str], SyscallLog], first: int
) -> None:
    """A write returning 0 would loop forever: it raises, and any partial bytes are removed."""
    with TraceWriter(trace, fsync="never") as w:
        w.append(b.user_text("one", timestamp=TS))
        before = trace.read_bytes()
        writes = seam("write")
        writes.script = [lambda fd, data: writes.real(fd, data[:first]), lambda fd, data: 0]
        with pytest.raises(TraceWriteError, match="no progress") as info:
            w.append(b.user_text("two" * 50, timestamp=TS))
        assert (info.value.errno, info.value.offset) == (None, len(before))
        assert trace.read_bytes() == before
        assert not w.poisoned
        writes.script.clear()
        w.append(b.user_text("three", timestamp=TS))
    assert texts(trace) == ["one", "three"]


def test_failed_fsync_poisons_the_writer_r_trace_16(
    trace: Path, seam: Callable[[str], SyscallLog]
) -> None:
    """After an fdatasync error every later append raises, even once the fault is gone; the
    record whose sync failed is taken back out (R-TRACE-15, R-TRACE-16)."""
    with TraceWriter(trace, fsync="turn") as w:
        w.append(b.user_text("one", timestamp=TS))
        before = trace.read_bytes()
        datasync = seam("fdatasync")
        datasync.script = [raising(errno.EIO)]
        with pytest.raises(TraceWriteError) as info:
            w.append(b.request_end("completed", timestamp=TS))
        assert (info.value.errno, info.value.offset) == (errno.EIO, len(before))
        assert w.poisoned
        assert datasync.script == []
        for _ in range(2):
            with pytest.raises(TraceWriteError, match="poisoned") as later:
                w.append(b.user_text("two", timestamp=TS))
            assert later.value.errno == errno.EIO
        with pytest.raises(TraceWriteError, match="poisoned"):
            w.rotate()
        assert len(datasync.calls) == 1
    assert trace.read_bytes() == before


def test_failed_fsync_at_rotation_poisons_r_trace_16(
    tmp_path: Path, seam: Callable[[str], SyscallLog]
) -> None:
    first = tmp_path / "s_001.jsonl"
    with TraceWriter(first, fsync="rotate") as w:
        w.append(b.user_text("one", timestamp=TS))
        fsync = seam("fsync")
        fsync.script = [raising(errno.EIO)]
        with pytest.raises(TraceWriteError):
            w.rotate()
        assert (w.poisoned, w.path) == (True, first)
        with pytest.raises(TraceWriteError, match="poisoned"):
            w.append(b.user_text("two", timestamp=TS))
    assert texts(first) == ["one"]


def test_failed_fsync_at_close_raises_and_releases(
    trace: Path, seam: Callable[[str], SyscallLog]
) -> None:
    w = TraceWriter(trace, fsync="turn")
    w.append(b.user_text("one", timestamp=TS))
    fsync = seam("fsync")
    fsync.script = [raising(errno.EIO)]
    with pytest.raises(TraceWriteError) as info:
        w.close()
    assert info.value.errno == errno.EIO
    assert w.closed
    with TraceWriter(trace, fsync="never") as again:  # the lock was released regardless
        again.append(b.user_text("two", timestamp=TS))
    assert texts(trace) == ["one", "two"]


def test_failed_truncate_after_partial_write_poisons_and_next_writer_repairs_r_trace_14(
    trace: Path, seam: Callable[[str], SyscallLog]
) -> None:
    """The fragment cannot be cut: the writer is poisoned; a new writer cuts it on open and
    reports it (R-TRACE-14)."""
    with TraceWriter(trace, fsync="never") as w:
        w.append(b.user_text("one", timestamp=TS))
        before = trace.read_bytes()
        writes, truncs = seam("write"), seam("ftruncate")
        writes.script = [lambda fd, data: writes.real(fd, data[:30]), raising(errno.EIO)]
        truncs.script = [raising(errno.EIO)]
        with pytest.raises(TraceWriteError, match="poisoned") as info:
            w.append(b.user_text("two" * 20, timestamp=TS))
        assert (info.value.errno, info.value.offset) == (errno.EIO, len(before))
        assert w.poisoned
        assert (
            trace.read_bytes() == before + encode_line(b.user_text("two" * 20, timestamp=TS))[:30]
        )
        with pytest.raises(TraceWriteError, match="poisoned"):
            w.append(b.user_text("three", timestamp=TS))
        assert len(writes.calls) == 2
    with TraceWriter(trace, fsync="never") as fresh:
        assert fresh.diagnostics == [
            Diagnostic(
                trace, 2, "torn_tail_repaired", f"truncated 30 byte(s) at offset {len(before)}"
            )
        ]
        fresh.append(b.user_text("four", timestamp=TS))
    assert texts(trace) == ["one", "four"]
