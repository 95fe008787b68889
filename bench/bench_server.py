"""`penguin serve` stream throughput and latency (issue 19).

A `penguin serve` child process hosts ``SESSIONS`` sessions, each running one scripted task of
``TURNS`` tool turns (``DELTAS`` streamed text deltas in all, plus the tool-call and tool-output
fragments), all at once, with two SSE subscribers per session in this process.  Reported:

- aggregate events delivered per second (every event of every subscriber, from the first POST
  to the last subscriber seeing its task end); target >= 20,000/s;
- latency from a record's write (its ``timestamp``, ms resolution; the ``session_meta``s, stamped
  when their sessions were created, are left out) to its arrival at a client: p50 / p99;
  target p99 <= 50 ms;
- one session's stream to one client, against iterating ``run()`` in process over the same
  script, measured in the same run (events per second each, and the ratio); target >= 0.5.

The machine is shared; the figures are what this run saw, so the load average is printed with
them, and so is the server's CPU time per delivered event during the fan-out (from
``/proc/<pid>/stat``; it depends far less on the load than the rates do).  The same tasks run
by the engine alone, all at once in this process with no server, give the ceiling of the
fan-out in the same run (the server cannot deliver more than twice what the engine produces).
``BENCH_SERVER_SESSIONS`` scales the fan-out (default 100); ``BENCH_SERVER_FSYNC`` is the
server's ``--fsync`` (default ``turn``, the figures the README reports).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

from engine import Session, allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import builders as b

SESSIONS = int(os.environ.get("BENCH_SERVER_SESSIONS", "100"))
# The server's --fsync; the README's figures are for the default policy (turn).
FSYNC = os.environ.get("BENCH_SERVER_FSYNC", "turn")
# Workspace snapshots before each tool turn are on by default in `penguin serve`;
# BENCH_SERVER_SNAPSHOTS=0 measures the fan-out without them.
SNAPSHOTS = os.environ.get("BENCH_SERVER_SNAPSHOTS", "1") != "0"
SUBSCRIBERS = 2
ONE_RUNS = 3
TURNS = 20
DELTAS = 200
TOKEN = "bench-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
_TS = re.compile(rb'"timestamp":"([^"]+)"')


def script() -> dict[str, Any]:
    per = DELTAS // TURNS
    responses: list[Any] = [
        [
            {"text": " ".join(f"w{i}_{k}" for k in range(per)), "chunks": per},
            {
                "tool_call": {
                    "name": "echo",
                    "arguments": {"i": i},
                    "result": {"output": f"out {i}"},
                }
            },
        ]
        for i in range(TURNS)
    ]
    responses.append([{"text": "done"}])
    return {"responses": responses, "tools": [{"name": "echo", "description": "echo"}]}


async def _spawn(home: Path, script_path: Path) -> tuple[Any, str]:
    if not SNAPSHOTS:
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text("[defaults]\nsnapshots = false\n")
    exe = os.path.join(os.path.dirname(sys.executable), "penguin")
    args = [exe, "--home", str(home), "serve", "--port", "0", "--token", TOKEN, "--script"]
    args += [str(script_path), "--approve", "allow-all", "--workspace", str(script_path.parent)]
    args += ["--fsync", FSYNC]
    proc = await anyio.open_process(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    buf = b""
    assert proc.stderr is not None
    with anyio.fail_after(60):
        while (m := re.search(rb"listening on (http://127\.0\.0\.1:\d+)", buf)) is None:
            buf += await proc.stderr.receive()
    return proc, m.group(1).decode()


def _cpu_s(pid: int) -> float | None:
    """The process's user + system CPU seconds (Linux only; ``None`` elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


@functools.lru_cache(maxsize=4096)
def _epoch(ts: bytes) -> float:
    return _dt.datetime.fromisoformat(ts.decode().replace("Z", "+00:00")).timestamp()


async def _subscribe(
    c: httpx.AsyncClient, sid: str, ready: anyio.Event, counts: list[int], lat: list[float]
) -> None:
    # Parsed as bytes, one clock reading per chunk received: the client shares the machine's
    # two cores with the server, so its own cost per event is kept small.
    async with c.stream("GET", f"/api/sessions/{sid}/stream") as resp:
        buf = b""
        async for chunk in resp.aiter_raw():
            now = time.time()
            if not ready.is_set():
                ready.set()
            *events, buf = (buf + chunk).split(b"\n\n")
            for ev in events:
                if not ev.startswith(b"id: "):
                    continue  # a snapshot, a notice or a comment: no id
                counts[0] += 1
                head, _, rest = ev.partition(b"\n")
                if b"+" not in head:
                    # A session_meta is stamped when its session was created (before the clock
                    # starts), not when it was written with the first record: not a latency.
                    m = None if b'"type":"session_meta"' in rest[:100] else _TS.search(rest)
                    if m:
                        lat.append(now - _epoch(m.group(1)))
                elif b'"task_state"' in rest and b'"state":"idle"' in rest:
                    return  # the task's end (the snapshot at connection has no id)


async def _fan_out(base: str, sessions: int) -> tuple[int, float, list[float]]:
    limits = httpx.Limits(max_connections=sessions * SUBSCRIBERS + 20)
    async with httpx.AsyncClient(base_url=base, headers=AUTH, timeout=120, limits=limits) as c:
        ids = [(await c.post("/api/sessions", json={})).json()["id"] for _ in range(sessions)]
        counts = [0]
        lat: list[float] = []
        async with anyio.create_task_group() as tg:
            readies = []
            for sid in ids:
                for _ in range(SUBSCRIBERS):
                    ev = anyio.Event()
                    readies.append(ev)
                    tg.start_soon(_subscribe, c, sid, ev, counts, lat)
            for ev in readies:
                await ev.wait()
            start = time.perf_counter()
            for sid in ids:
                r = await c.post(
                    f"/api/sessions/{sid}/tasks", json={"input": [{"type": "text", "text": "go"}]}
                )
                assert r.status_code == 202, r.text
        return counts[0], time.perf_counter() - start, lat


async def _session(home: Path, fsync: Any = "turn") -> Session:
    llm = ScriptedLLM(script())
    return await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        root=home / "inproc",
        workspace=home,
        fsync=fsync,
    )


async def _iterate(session: Session, counts: list[int]) -> None:
    async for _ in session.run([b.user_text("go")], approve=allow_all):
        counts[0] += 1


async def _in_process(home: Path) -> tuple[int, float]:
    counts = [0]
    async with await _session(home) as session:
        start = time.perf_counter()
        await _iterate(session, counts)
        return counts[0], time.perf_counter() - start


async def _engine_alone(home: Path, sessions: int) -> tuple[int, float, float]:
    """The same tasks run by the engine alone, all at once in this process, no server (the
    sessions made first, as the fan-out makes them before its clock starts): the rate the
    server's fan-out cannot beat (each event goes to two subscribers)."""
    counts = [0]
    async with contextlib.AsyncExitStack() as stack:
        made = [
            await stack.enter_async_context(await _session(home, FSYNC)) for _ in range(sessions)
        ]
        cpu0, start = _own_cpu_s(), time.perf_counter()
        async with anyio.create_task_group() as tg:
            for session in made:
                tg.start_soon(_iterate, session, counts)
        return counts[0], time.perf_counter() - start, _own_cpu_s() - cpu0


async def _run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        script_path = home / "script.json"
        script_path.write_text(json.dumps(script()))
        proc, base = await _spawn(home / "root", script_path)
        try:
            # One session's task lasts tens of ms: best of ``ONE_RUNS`` on both sides of the ratio.
            one = [await _fan_out(base, 1) for _ in range(ONE_RUNS)]
            cpu0 = _cpu_s(proc.pid)
            mine0 = _own_cpu_s()
            events, elapsed, lat = await _fan_out(base, SESSIONS)
            mine1 = _own_cpu_s()
            cpu1 = _cpu_s(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
        runs = [await _in_process(home) for _ in range(ONE_RUNS)]
        alone_events, alone_s, alone_cpu = await _engine_alone(home, SESSIONS)
    lat.sort()
    one_rate = max(n / t for n, t, _ in one)
    run_rate = max(n / t for n, t in runs)
    return {
        "sessions": SESSIONS,
        "subscribers": SESSIONS * SUBSCRIBERS,
        "events": events,
        "events_per_s": events / elapsed,
        "p50_ms": statistics.median(lat) * 1000,
        "p99_ms": lat[int(len(lat) * 0.99) - 1] * 1000,
        "one_stream_events_per_s": one_rate,
        "run_events_per_s": run_rate,
        "ratio": one_rate / run_rate,
        "cpu_us_per_event": None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / events * 1e6,
        "client_cpu_us_per_event": (mine1 - mine0) / events * 1e6,
        "alone_events_per_s": alone_events / alone_s,
        "alone_cpu_us_per_event": alone_cpu / alone_events * 1e6,
        "load": os.getloadavg()[0],
    }


def main() -> None:
    r = anyio.run(_run)
    print(
        f"server: {r['sessions']} sessions x {SUBSCRIBERS} subscribers: {r['events']} events, "
        f"{r['events_per_s']:,.0f} events/s delivered (target >= 20,000); record write -> client "
        f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms (target p99 <= 50)"
    )
    print(
        f"server: one stream {r['one_stream_events_per_s']:,.0f} events/s vs run() in process "
        f"{r['run_events_per_s']:,.0f} events/s: ratio {r['ratio']:.2f} (target >= 0.5)"
    )
    cpu = r["cpu_us_per_event"]
    print(
        f"server: {'n/a' if cpu is None else f'{cpu:.0f}'} us of server CPU per delivered event "
        f"(client {r['client_cpu_us_per_event']:.0f} us); --fsync {FSYNC}; "
        f"snapshots {'on' if SNAPSHOTS else 'off'}; "
        f"load average {r['load']:.1f} on {os.cpu_count()} CPUs"
    )
    alone = r["alone_events_per_s"]
    print(
        f"server: the engine alone, {r['sessions']} sessions in process: {alone:,.0f} events/s "
        f"produced ({alone * SUBSCRIBERS:,.0f}/s for {SUBSCRIBERS} subscribers each), "
        f"{r['alone_cpu_us_per_event']:.0f} us of CPU per event; the server delivered "
        f"{r['events_per_s'] / (alone * SUBSCRIBERS):.2f}x of that"
    )


if __name__ == "__main__":
    main()
