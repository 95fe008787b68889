"""Engine loop throughput: turns per second with an instant model, a no-op tool and the real
TraceWriter; whether per-turn cost grows with history; streamed deltas per second.

Baselines measured in the same run: the raw cost of writing the same number of records with a
bare TraceWriter (what any engine must pay), so the ratio shows the loop's own overhead; and,
for the stream, a bare anyio memory-stream pass-through (one producer task, one consumer) of
the very messages ``run()`` yielded (target: ``run()`` >= 0.5x of it, issue 18); for the
server-shaped task (``bench_server``'s script: 200 streamed text deltas, 20 tool turns), the CPU
per record of ``run()`` against a bare msgspec encode + ``os.write`` of the same records, one
write each (issues 18/19: the engine's share of the server's CPU per event).

The machine this runs on is shared, so no figure compares two moments: load changes between
them.  The stream sides are measured in CPU time (``time.process_time``), interleaved, best of
``STREAM_ROUNDS``.  The per-turn growth runs two sessions in lock step: a fresh one (turns
1-100) and one already 900 turns deep (turns 901-1000) take turns one at a time, each turn
timed from the moment it is let go to the moment its next request reaches the model, so both
windows see the same load; the ratio of the median turns is reported for five runs, and the
target (<= 1.2) holds for each.
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from bench.bench_server import script as server_script
from engine import Session, allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import DataRoot, TraceWriter, encode_line, iter_trace
from eventstore import builders as b

TURNS = 1000
DELTAS = 100_000
GROWTH_RUNS = 5
STREAM_ROUNDS = 3
RECORD_ROUNDS = 25  # server-shaped tasks, each against its own bare-write baseline
_clock = time.process_time


def _tool_script(turns: int) -> dict[str, Any]:
    responses: list[Any] = [
        [{"tool_call": {"name": "noop", "arguments": {"i": i}, "result": {"output": "ok"}}}]
        for i in range(turns - 1)
    ]
    responses.append([{"text": "done"}])
    return {"responses": responses, "tools": [{"name": "noop", "description": "does nothing"}]}


class _GatedLLM(ScriptedLLM):
    """Waits for a permit before answering each request; says when a request arrived."""

    def __init__(
        self,
        script: dict[str, Any],
        arrivals: MemoryObjectSendStream[None],
        permits: MemoryObjectReceiveStream[None],
    ) -> None:
        super().__init__(script)
        self._arrivals = arrivals
        self._permits = permits

    def stream(self, request: Any) -> Any:
        inner = super().stream(request)

        async def gated() -> Any:
            await self._arrivals.send(None)
            await self._permits.receive()
            async for msg in inner:
                yield msg

        return gated()


async def _lockstep(home: Path, warm: int, timed: int) -> tuple[list[float], list[float]]:
    """Per-turn wall times of turns ``1..timed`` of a fresh session and of turns
    ``warm+1..warm+timed`` of another, run alternately one turn at a time."""
    early: list[float] = []
    late: list[float] = []
    async with anyio.create_task_group() as tg:
        gates = []
        for name, turns in (("early", timed + 1), ("late", warm + timed + 1)):
            arrivals_send, arrivals = anyio.create_memory_object_stream[None](1)
            permits, permits_recv = anyio.create_memory_object_stream[None](1)
            llm = _GatedLLM(_tool_script(turns), arrivals_send, permits_recv)
            tg.start_soon(_gated_task, home / name, llm)
            gates.append((arrivals, permits))
        (early_arrivals, early_permits), (late_arrivals, late_permits) = gates
        await early_arrivals.receive()
        await late_arrivals.receive()
        for _ in range(warm):  # untimed: bring the second session to turn ``warm``
            await late_permits.send(None)
            await late_arrivals.receive()
        for _ in range(timed):
            for arrivals, permits, out in (
                (early_arrivals, early_permits, early),
                (late_arrivals, late_permits, late),
            ):
                start = time.perf_counter()
                await permits.send(None)
                await arrivals.receive()
                out.append(time.perf_counter() - start)
        await early_permits.send(None)  # the final replies
        await late_permits.send(None)
    return early, late


async def _gated_task(home: Path, llm: ScriptedLLM) -> None:
    ws = home / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        root=DataRoot(home / "data"),
        workspace=ws,
        compaction=None,
        max_turns=0,
        fsync="never",
    )
    async with session:
        async for _msg in session.run([b.user_text("go")], approve=allow_all):
            pass


async def _run_task(home: Path, script: dict[str, Any]) -> tuple[float, int]:
    llm = ScriptedLLM(script)
    ws = home / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        root=DataRoot(home / "data"),
        workspace=ws,
        compaction=None,
        max_turns=0,
        fsync="never",
    )
    count = 0
    async with session:
        start = _clock()
        async for _msg in session.run([b.user_text("go")], approve=allow_all):
            count += 1
        elapsed = _clock() - start
    return elapsed, count


def _raw_records(path: Path, n: int) -> float:
    msgs = [
        b.request_begin(),
        b.tool_call("noop", {"i": 1}, "call_1_1"),
        b.approval_decision("allow", "call_1_1"),
        b.request_end("completed"),
        b.tool_call_output("call_1_1", "ok"),
    ]
    start = _clock()
    with TraceWriter(path, fsync="never") as writer:
        for i in range(n):
            writer.append(msgs[i % len(msgs)])
    return _clock() - start


async def _pass_through(msgs: list[Any]) -> float:
    """The floor for any stream of these messages: one task sends them through an unbounded
    anyio memory object stream (as ``run()``'s does) and the consumer receives them."""
    send, recv = anyio.create_memory_object_stream[Any](math.inf)
    received = 0

    async def produce() -> None:
        async with send:
            for msg in msgs:
                await send.send(msg)

    start = _clock()
    async with anyio.create_task_group() as tg, recv:
        tg.start_soon(produce)
        async for _msg in recv:
            received += 1
    elapsed = _clock() - start
    assert received == len(msgs)
    return elapsed


async def _collect_run(home: Path, script: dict[str, Any]) -> tuple[float, list[Any]]:
    llm = ScriptedLLM(script)
    ws = home / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        root=DataRoot(home / "data"),
        workspace=ws,
        compaction=None,
        fsync="never",
    )
    out: list[Any] = []
    async with session:
        start = _clock()
        async for msg in session.run([b.user_text("go")], approve=allow_all):
            out.append(msg)
        elapsed = _clock() - start
    return elapsed, out


async def _server_task(home: Path) -> tuple[float, int, Path]:
    """CPU time of iterating ``run()`` over the server bench's script, the messages it yielded
    and the trace it wrote (``fsync="never"``: the engine's own work, not the disk's).  Every
    round's session goes to one data root, as a server's do."""
    llm = ScriptedLLM(server_script())
    ws = home / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        root=DataRoot(home / "data"),
        workspace=ws,
        fsync="never",
    )
    count = 0
    async with session:
        start = _clock()
        async for _msg in session.run([b.user_text("go")], approve=allow_all):
            count += 1
        elapsed = _clock() - start
        path = session.trace_path
    return elapsed, count, path


def _bare_writes(records: list[Any], path: Path) -> float:
    """The floor for writing these records: msgspec encode and one ``os.write`` each."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o600)
    try:
        start = _clock()
        for record in records:
            os.write(fd, encode_line(record))
        return _clock() - start
    finally:
        os.close(fd)


def _per_record(home: Path) -> tuple[float, float, int, int]:
    """Best CPU time of the server-shaped task and of its bare writes, interleaved, with the
    numbers of messages yielded and records written."""
    best_run = best_bare = float("inf")
    count = records = 0
    for i in range(RECORD_ROUNDS):
        elapsed, count, path = anyio.run(_server_task, home)
        written = list(iter_trace(path))
        records = len(written)
        best_run = min(best_run, elapsed)
        best_bare = min(best_bare, _bare_writes(written, home / f"bare{i}.jsonl"))
    return best_run, best_bare, count, records


def _growth(home: Path) -> float:
    """Median per-turn cost of turns 901-1000 over that of turns 1-100, measured in lock step."""
    early, late = anyio.run(_lockstep, home, TURNS - 100, 100)
    return statistics.median(late) / statistics.median(early)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        elapsed, _ = anyio.run(_run_task, home / "a", _tool_script(TURNS))
        raw = _raw_records(home / "raw_001.jsonl", TURNS * 7)
        print(
            f"turns/s (1000-turn task, no-op tool, CPU time): {TURNS / elapsed:,.0f}  "
            "(target >= 2,000; reference engine ~600)"
        )
        print(
            f"loop vs bare writer for the same {TURNS * 7} records: {raw / elapsed:.2f}x  "
            f"(writer alone {TURNS * 7 / raw:,.0f} records/s)"
        )
        growth = [_growth(home / f"g{i}") for i in range(GROWTH_RUNS)]
        ok = all(g <= 1.2 for g in growth)
        print(
            "per-turn cost, turns 901-1000 / 1-100 (medians, lock step), five runs: "
            + ", ".join(f"{g:.2f}" for g in growth)
            + f"  (target <= 1.2 in every run: {'met' if ok else 'MISSED'})"
        )

        script = {"responses": [[{"text": ["x"] * DELTAS}]]}
        best_run = best_bare = float("inf")
        count = 0
        for i in range(STREAM_ROUNDS):  # interleaved, best of each side
            elapsed, msgs = anyio.run(_collect_run, home / f"b{i}", script)
            count = len(msgs)
            best_run = min(best_run, elapsed)
            best_bare = min(best_bare, anyio.run(_pass_through, msgs))
        ratio = best_bare / best_run
        print(
            f"stream ({DELTAS:,} text deltas): bare memory-stream pass-through "
            f"{count / best_bare:,.0f} messages/s 1.00x; run() {count / best_run:,.0f} "
            f"messages/s {ratio:.2f}x  (target >= 0.50x: {'met' if ratio >= 0.5 else 'MISSED'})"
        )

        run_s, bare_s, count, records = _per_record(home / "per_record")
        print(
            f"server-shaped task (200 deltas, 20 tool turns: {count} messages, {records} records), "
            f"CPU per record, best of {RECORD_ROUNDS}: run() {run_s / records * 1e6:.1f} us "
            f"({run_s / count * 1e6:.1f} us per yielded message); bare msgspec encode + os.write "
            f"of the same records {bare_s / records * 1e6:.2f} us ({run_s / bare_s:.0f}x)"
        )


if __name__ == "__main__":
    main()
