"""Concurrency suite: many producers, one writer per session, readers racing the writer
(R-TRACE-10, R-TRACE-11, R-TRACE-12, R-TRACE-18, R-TRACE-18a, R-READ-2, R-READ-3).

1. 16 producers — 8 threads and 8 anyio tasks — append through one ``TraceWriter`` while a 17th
   actor rotates it: every line decodes, every record lands once and whole in exactly one file,
   each producer's order is kept, every file starts with its rotation head.
2. A second process asking for a session another process holds gets ``SessionLocked`` at once,
   naming the holder's pid; once the holder is SIGKILLed the lock is free within a bound (the
   measured latency is recorded).
3. Readers run while a writer process appends records of up to 1 MB and rotates: the tolerant
   reader, the streaming reader and ``penguin inspect --follow``'s follower never return a
   partial line as a record and never report a malformed line; the follower sees every record
   exactly once, in order, across the rotations.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import (
    DataRoot,
    OmniMessage,
    SessionLocked,
    TextPayload,
    TraceWriter,
    decode,
    iter_trace,
    read_trace,
)
from eventstore import builders as b
from replay import resume_session

EXTENDED = bool(os.environ.get("PENGUIN_EXTENDED"))
CHILD = Path(__file__).with_name("_child_session.py")
TS = "2026-03-01T10:00:00.000Z"
PER_PRODUCER = 2000 if EXTENDED else 300
ROTATE_RECORDS = 20_000 if EXTENDED else 1500
ROTATE_EVERY = 100


# ----------------------------------------------------------------------------- 16 producers


@pytest.mark.anyio
async def test_sixteen_producers_and_a_rotator_share_one_writer_r_trace_12(
    tmp_path: Path, figures: Any
) -> None:
    """R-TRACE-10/11/12: whole lines, each record once, per-producer order; a head appended
    right after each rotation lands in the new file (producers may get in before it)."""
    rng = random.Random(7)
    sizes = [rng.choice((5, 50, 500, 5000, 50_000)) for _ in range(PER_PRODUCER)]
    head = b.session_meta(
        session_id="many",
        provider="p",
        model_id="m",
        model_context_window="unknown",
        system_prompt="",
        agent_state="/x",
        workspace="/x",
        timestamp=TS,
    )
    writer = TraceWriter(tmp_path / "many_001.jsonl", fsync="never")
    writer.append(head)
    go = threading.Event()
    done = threading.Event()
    rotations = 0

    def record(producer: str, i: int) -> OmniMessage:
        return b.user_text(f"{producer}:{i}:" + "z" * sizes[i], timestamp=TS)

    def thread_producer(k: int) -> None:
        go.wait()
        for i in range(PER_PRODUCER):
            writer.append(record(f"thread{k}", i))

    def rotator() -> None:
        nonlocal rotations
        go.wait()
        while not done.is_set():
            writer.rotate()
            writer.append(head)
            rotations += 1
            done.wait(0.005)

    async def task_producer(k: int) -> None:
        for i in range(PER_PRODUCER):
            writer.append(record(f"task{k}", i))
            if i % 7 == 0:
                await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.to_thread.run_sync, rotator)
        async with anyio.create_task_group() as producers:
            for k in range(8):
                producers.start_soon(anyio.to_thread.run_sync, thread_producer, k)
            for k in range(8):
                producers.start_soon(task_producer, k)
            go.set()
        done.set()
    writer.close()

    files = sorted(tmp_path.glob("many_*.jsonl"))
    assert len(files) == rotations + 1 and rotations > 3
    seen: dict[str, list[int]] = {}
    lines = 0
    for path in files:
        content = path.read_bytes()
        assert content.endswith(b"\n")
        records = [decode(line) for line in content.split(b"\n")[:-1]]  # every line decodes
        lines += len(records)
        assert records.count(head) == 1, f"{path.name} does not hold its head once"
        for rec in (r for r in records if r != head):
            assert isinstance(rec.payload, TextPayload)
            producer, i, body = rec.payload.text.split(":", 2)
            assert len(body) == sizes[int(i)], "a record was cut"
            seen.setdefault(producer, []).append(int(i))
    assert sorted(seen) == sorted([f"thread{k}" for k in range(8)] + [f"task{k}" for k in range(8)])
    for order in seen.values():
        assert order == list(range(PER_PRODUCER))  # once each, in submission order
    figures(
        "concurrency_producers",
        {"producers": 16, "records": 16 * PER_PRODUCER, "rotations": rotations, "lines": lines},
    )


# ----------------------------------------------------------------------------- the lock


async def _make_session(home: Path, workspace: Path) -> str:
    from engine import Session, allow_all

    llm = ScriptedLLM([[{"text": "hello"}]])
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        root=DataRoot(home),
        workspace=workspace,
        compaction=None,
    )
    async with session:
        async for _ in session.run([b.user_text("hi")], approve=allow_all):
            pass
    return session.id


async def _try_resume(home: Path, session_id: str) -> None:
    llm = ScriptedLLM([])
    session = await resume_session(
        DataRoot(home), session_id, llm=llm, environment=ScriptedEnvironment.from_llm(llm)
    )
    async with session:
        pass


def test_second_process_is_refused_then_admitted_after_the_holder_dies_r_trace_18(
    tmp_path: Path, figures: Any
) -> None:
    """R-TRACE-18/18a: SessionLocked at once, naming the holder pid; free once it is killed."""
    home = tmp_path / "home"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    session_id = anyio.run(_make_session, home, workspace)
    holder = subprocess.Popen(
        [sys.executable, str(CHILD), "hold", "--home", str(home), "--session", session_id],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == f"locked {holder.pid}\n".encode()
        t0 = time.monotonic()
        with pytest.raises(SessionLocked) as info:
            anyio.run(_try_resume, home, session_id)
        refused_ms = (time.monotonic() - t0) * 1000
        assert info.value.holder_pid == holder.pid
        assert info.value.session_id == session_id
        assert str(holder.pid) in str(info.value)

        holder.send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        # Once the kernel has reaped the holder its descriptors are closed and the flock is
        # gone: the very next attempt must be admitted (no polling, no time limit to tune).
        holder.wait()
        anyio.run(_try_resume, home, session_id)
        admitted_ms = (time.monotonic() - t0) * 1000
        attempts = 1
    finally:
        holder.kill()
        holder.communicate()
    figures(
        "concurrency_lock",
        {
            "refused_after_ms": round(refused_ms, 2),
            "admitted_after_kill_ms": round(admitted_ms, 2),
            "poll_attempts": attempts,
        },
    )


# ----------------------------------------------------------------------------- readers


def _check_numbered(records: list[OmniMessage], expect_from: int | None) -> int | None:
    """Records of one file are the head then ``<seq>:x…`` with contiguous seqs; returns the
    last seq (or ``expect_from - 1`` when there is none)."""
    last = None if expect_from is None else expect_from - 1
    for rec in records:
        if rec.type == "session_meta":
            continue
        assert isinstance(rec.payload, TextPayload)
        seq, _, body = rec.payload.text.partition(":")
        assert body == "x" * len(body) and len(body) in (10, 1000, 100_000, 1_000_000), (
            "a partial record was returned"
        )
        if last is not None:
            assert int(seq) == last + 1, f"gap or repeat: {last} -> {seq}"
        last = int(seq)
    return last


def test_readers_never_see_a_partial_line_while_the_writer_rotates_r_read_2(
    tmp_path: Path, figures: Any
) -> None:
    """R-READ-2/3, R-TRACE-10/11: readers racing a writer process that rotates."""
    try:
        from penguin.cli.follow import Follower
    except ImportError:  # pragma: no cover - the follower belongs to the CLI
        Follower = None  # type: ignore[assignment,misc]
    writer = subprocess.Popen(
        [
            sys.executable,
            str(CHILD),
            "rotate",
            "--dir",
            str(tmp_path),
            "--count",
            str(ROTATE_RECORDS),
            "--every",
            str(ROTATE_EVERY),
        ],
        stdout=subprocess.PIPE,
    )
    followed: list[OmniMessage] = []
    follower = None
    reads = torn_seen = 0
    try:
        first = tmp_path / "tail_001.jsonl"
        while writer.poll() is None or reads == 0:
            files = sorted(tmp_path.glob("tail_*.jsonl"))
            if not files:
                continue
            if follower is None and Follower is not None and first.exists():
                follower = Follower(first, lambda _i, _o, _l, rec: followed.append(rec))
            if follower is not None:
                follower.poll()
            newest = read_trace(files[-1], report=False)
            reads += 1
            assert not [d for d in newest.diagnostics if d.kind == "malformed"]
            torn_seen += any(d.kind == "torn_tail" for d in newest.diagnostics)
            _check_numbered(newest.records, None)
            # The streaming reader across the newest rotation boundary, as the files are now.
            _check_numbered(list(iter_trace(files[-2:], report=False)), None)
        assert writer.wait() == 0
    finally:
        writer.kill()
        writer.communicate()
    files = sorted(tmp_path.glob("tail_*.jsonl"))
    assert len(files) == ROTATE_RECORDS // ROTATE_EVERY
    assert _check_numbered(read_trace(files, report=False).records, 0) == ROTATE_RECORDS - 1
    if follower is not None:
        follower.poll()
        assert _check_numbered(followed, 0) == ROTATE_RECORDS - 1
    figures(
        "concurrency_readers",
        {
            "records_written": ROTATE_RECORDS,
            "files": len(files),
            "reader_passes": reads,
            "passes_that_saw_a_torn_tail": torn_seen,
            "follower_records": len([r for r in followed if r.type != "session_meta"]),
            "partial_lines_returned": 0,
        },
    )
