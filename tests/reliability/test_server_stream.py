"""The server's stream under disconnects and crashes (R-SRV-8, R-SRV-14).

1. Reconnect property: SSE clients disconnect and reconnect at seeded random moments, with the
   replay buffer forced small, while tasks run: every recorded message arrives exactly once, in
   trace order (the gaps come from the buffer or from the trace).
2. Crash: a `penguin serve` child is SIGKILLed at seeded random moments during tasks
   (20 kills in `make test`, 100 with ``PENGUIN_EXTENDED=1``), restarted on the same root, and
   the client reconnects with its ``Last-Event-ID``: every recorded message still arrives exactly
   once and in order, the trace validates, and the next task's first request equals what a
   resumed session sends.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest
from serverkit import AUTH, SSE, TOKEN, Reader, is_server, scripted, served, spawn_server

from engine import allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import RequestBeginPayload, encode, iter_trace
from eventstore import builders as b
from replay import request_at, resume_session, validate_session

pytestmark = pytest.mark.anyio

EXTENDED = bool(os.environ.get("PENGUIN_EXTENDED"))
KILLS = 100 if EXTENDED else 20
SEED = 1919
ZYGOTE = Path(__file__).with_name("_server_zygote.py")
TOOLS = [{"name": "echo", "description": "echo", "parameters": {"type": "object"}}]


def _turn(n: int, sleep: int) -> list[dict[str, Any]]:
    return [
        {"text": f"turn {n}: looking at it", "chunks": 6},
        {"sleep_ms": sleep},
        {
            "tool_call": {
                "name": "echo",
                "arguments": {"n": n},
                "result": {"output": f"out {n}", "chunks": ["ou", f"t {n}"], "delay_ms": sleep},
            }
        },
    ]


def script(turns: int, sleep: int) -> dict[str, Any]:
    responses: list[Any] = [_turn(i, sleep) for i in range(turns)]
    responses.append([{"text": "all done", "chunks": 4}])
    return {"responses": responses, "tools": TOOLS}


def trace(root: Path, sid: str) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for path in sorted(root.rglob(f"{sid}_*.jsonl")):
        index = int(path.stem.rsplit("_", 1)[1])
        out += [(f"{index}:{o}", encode(r)) for o, r in enumerate(iter_trace(path, report=False))]
    return out


def recorded(events: list[SSE]) -> list[tuple[str, bytes]]:
    return [(e.id, e.data.encode()) for e in events if e.event is None and e.id and "+" not in e.id]


def _snapshot(e: SSE) -> bool:
    return is_server("task_state")(e) and e.id is None


# ---------------------------------------------------------------------------- reconnect property


async def _client(
    c: httpx.AsyncClient, sid: str, rng: random.Random, done: anyio.Event, out: list[SSE]
) -> int:
    """Reads a random number of events per connection; once the tasks are done, catches up to
    the snapshot and returns the number of connections.  ``0:0`` asks for everything."""
    last: str | None = "0:0"
    connections = 0
    while True:
        finished = done.is_set()
        headers = {"Last-Event-ID": last} if last else {}
        connections += 1
        snap = False
        async with c.stream("GET", f"/api/sessions/{sid}/stream", headers=headers) as resp:
            rd = Reader(resp, last_id=last)
            budget = rng.randint(1, 25)
            async with anyio.create_task_group() as tg:
                if not finished:
                    # An idle stream sends nothing: the end of the tasks ends this connection.
                    async def stop() -> None:
                        await done.wait()
                        tg.cancel_scope.cancel()

                    tg.start_soon(stop)
                while budget > 0:
                    ev = await rd.next()
                    if ev.id is not None:
                        out.append(ev)
                        budget -= 1
                    elif _snapshot(ev) and finished:
                        snap = True
                        break
                tg.cancel_scope.cancel()
            last = rd.last_id
        if finished and snap:
            return connections


async def test_reconnect_property_exactly_once_in_order(tmp_path: Path, figures: Any) -> None:
    rng = random.Random(SEED)
    tasks = 4
    llm = scripted(*(script(4, 2)["responses"] * tasks), tools=TOOLS)
    async with served(tmp_path, llm_factory=llm, approval="allow-all", buffer_events=16) as s:
        sid = await s.new_session()
        h = s.app.state.penguin.host.hosted[sid]
        finished = anyio.Event()
        outs: list[list[SSE]] = [[], []]
        counts: list[int] = []

        async def driver() -> None:
            for _ in range(tasks):
                r = await s.post(
                    f"/api/sessions/{sid}/tasks", {"input": [{"type": "text", "text": "go"}]}
                )
                assert r.status_code == 202
                while h.busy is not None:
                    await h.idle.wait()
            finished.set()

        async def client(i: int) -> None:
            counts.append(
                await _client(s.client, sid, random.Random(rng.random()), finished, outs[i])
            )

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                tg.start_soon(driver)
                for i in range(2):
                    tg.start_soon(client, i)
    expected = trace(tmp_path, sid)
    for out in outs:
        assert recorded(out) == expected
    figures(
        "server_reconnect",
        {"clients": 2, "reconnects": sum(counts), "records": len(expected), "tasks": tasks},
    )


# ---------------------------------------------------------------------------- crash


async def _drain(rd: Reader, out: list[SSE]) -> None:
    try:
        while True:
            ev = await rd.next()
            if ev.id is not None:
                out.append(ev)
    except (EOFError, httpx.HTTPError):
        pass


class _Zygote:
    """Forks `serve` children from one pre-imported process (see ``_server_zygote.py``)."""

    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self._buf = b""

    async def spawn(self) -> tuple[int, str]:
        await self.proc.stdin.send(b"spawn\n")
        with anyio.fail_after(60):
            while b"\n" not in self._buf:
                self._buf += await self.proc.stdout.receive()
        line, _, self._buf = self._buf.partition(b"\n")
        pid, url = line.decode().split()
        return int(pid), url.split("/#", 1)[0]


async def test_crash_sigkill_reconnect_exactly_once(tmp_path: Path, figures: Any) -> None:
    rng = random.Random(SEED)
    root, ws = tmp_path / "root", tmp_path / "ws"
    ws.mkdir()
    script_path = tmp_path / "script.json"
    script_path.write_text(json.dumps(script(5, 15)))
    sid: str | None = None
    last: str | None = None
    out: list[SSE] = []
    kills = 0
    zygote_args = [sys.executable, str(ZYGOTE), str(root), str(script_path), str(ws), TOKEN]
    async with await anyio.open_process(zygote_args) as proc:
        zygote = _Zygote(proc)
        while kills < KILLS:
            pid, base = await zygote.spawn()
            try:
                async with httpx.AsyncClient(base_url=base, headers=AUTH, timeout=30) as c:
                    first = sid is None
                    if sid is None:
                        # A session exists once it has recorded something: the first task
                        # runs to its end before the kills begin.
                        sid = (await c.post("/api/sessions", json={})).json()["id"]
                        last = "0:0"
                    headers = {"Last-Event-ID": last} if last else {}
                    async with c.stream(
                        "GET", f"/api/sessions/{sid}/stream", headers=headers
                    ) as resp:
                        rd = Reader(resp, last_id=last)
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(_drain, rd, out)
                            r = await c.post(
                                f"/api/sessions/{sid}/tasks",
                                json={"input": [{"type": "text", "text": "go"}]},
                            )
                            assert r.status_code == 202, r.text
                            while (
                                first
                                and (await c.get(f"/api/sessions/{sid}")).json()["state"] != "idle"
                            ):
                                await anyio.sleep(0.05)
                            # The random moment of the kill.
                            await anyio.sleep(rng.uniform(0.0, 0.4))
                            os.kill(pid, signal.SIGKILL)
                        last = rd.last_id
            finally:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            kills += 1
        await proc.stdin.aclose()
    assert sid is not None
    # A last server: the client catches up, then one more task runs to its end.
    pre = tmp_path / "pre"
    shutil.copytree(root, pre, ignore=shutil.ignore_patterns("index.sqlite3*"))
    child = await spawn_server(root, script_path, ws)
    try:
        async with httpx.AsyncClient(base_url=child.base, headers=AUTH, timeout=30) as c:
            headers = {"Last-Event-ID": last} if last else {}
            async with c.stream("GET", f"/api/sessions/{sid}/stream", headers=headers) as resp:
                rd = Reader(resp, last_id=last)
                with anyio.fail_after(60):
                    for ev in await rd.until(_snapshot):
                        if ev.id is not None:
                            out.append(ev)
                    await c.post(
                        f"/api/sessions/{sid}/tasks",
                        json={"input": [{"type": "text", "text": "last"}]},
                    )
                    for ev in await rd.until(is_server("task_state", state="idle")):
                        if ev.id is not None:
                            out.append(ev)
    finally:
        child.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(15):
            assert await child.process.wait() == 0
    expected = trace(root, sid)
    assert recorded(out) == expected
    files = sorted(root.rglob(f"{sid}_*.jsonl"))
    assert [f for f in validate_session(files) if f.severity == "error"] == []
    # The served task's first request equals what a resumed session sends from the same trace.
    served_request = _first_new_request(files, pre, sid)
    assert served_request == await _resumed_first_request(pre, sid, ws, script_path)
    figures("server_crash", {"kills": kills, "records": len(expected)})


def _first_new_request(files: list[Path], pre: Path, sid: str) -> list[Any]:
    before = {
        p.name: sum(1 for _ in iter_trace(p, report=False)) for p in pre.rglob(f"{sid}_*.jsonl")
    }
    for path in files:
        index = int(path.stem.rsplit("_", 1)[1])
        for o, rec in enumerate(iter_trace(path, report=False)):
            if o >= before.get(path.name, 0) and isinstance(rec.payload, RequestBeginPayload):
                return _shape(request_at(files, (index, o)).messages)
    raise AssertionError("the last task sent no request")


def _shape(messages: list[Any]) -> list[Any]:
    """Messages without their timestamps (the prompt is written at a different moment)."""
    return [msgspec.json.decode(encode(m))["payload"] for m in messages]


async def _resumed_first_request(pre: Path, sid: str, ws: Path, script_path: Path) -> list[Any]:
    llm = ScriptedLLM(script_path)
    session = await resume_session(
        pre, sid, llm=llm, environment=ScriptedEnvironment.from_llm(llm), workspace=ws
    )
    llm.bind(session)
    async with session:
        async for _ in session.run([b.user_text("last")], approve=allow_all):
            pass
    return _shape(llm.requests[0].messages)
