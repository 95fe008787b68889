"""The server's ids and order come from the trace (SPEC R-SET-6)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from serverkit import Reader, is_server, scripted, served

from engine import Session
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import DataRoot, encode_line, iter_trace
from eventstore import builders as b
from replay import validate_session

pytestmark = pytest.mark.anyio


async def _engine_session(home: Path, ws: Path, *, crash: bool) -> str:
    """A session another process wrote; with ``crash``, left inside a request span."""
    llm = ScriptedLLM([[{"text": "one"}]])
    session = await Session.create(
        llm=llm, environment=ScriptedEnvironment.from_llm(llm), root=DataRoot(home), workspace=ws
    )
    async with session:
        async for _ in session.run([b.user_text("first")]):
            pass
    if crash:
        with open(session.trace_path, "ab") as f:  # killed right after it opened a request
            f.write(encode_line(b.request_begin()))
    return session.id


async def test_session_created_once_and_for_sessions_another_process_made(
    tmp_path: Path,
) -> None:
    """R-SET-6, R-SRV-9: one ``session_created`` per session created here (it was sent twice),
    and one for a session a CLI process created while the server runs (it was never sent)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    async with served(tmp_path, llm_factory=scripted([{"text": "x"}]), workspace=ws) as s:
        resp_cm = s.client.stream("GET", "/api/events")
        async with resp_cm as resp:
            rd = Reader(resp)
            await rd.opened()
            sid = await s.new_session()
            outside = await _engine_session(tmp_path, ws, crash=False)
            assert (await s.client.get("/api/sessions")).status_code == 200  # the index looks
            with anyio.fail_after(30):
                seen = await rd.until(is_server("session_created", id=outside))
            # Events come in order: a second session_created of ``sid`` (published with the
            # first, before the creation's response) would be among those read by now.
    created = [e.json for e in seen if is_server("session_created")(e)]
    assert [c["id"] for c in created].count(sid) == 1
    assert [(c["id"], c["source"]) for c in created if c["id"] == outside] == [(outside, "cli")]


async def test_input_is_stamped_after_the_closure_a_resume_writes(tmp_path: Path) -> None:
    """R-SET-6, V-20: after a crash, the server's resume closes the open request; the task's
    input, built when the request arrived, is stamped when written — after that closure."""
    ws = tmp_path / "ws"
    ws.mkdir()
    sid = await _engine_session(tmp_path, ws, crash=True)
    async with served(tmp_path, llm_factory=scripted([{"text": "two"}]), workspace=ws) as s:
        r = await s.post(
            f"/api/sessions/{sid}/tasks", {"input": [{"type": "text", "text": "second"}]}
        )
        assert r.status_code == 202, r.text
        with anyio.fail_after(30):
            while (await s.client.get(f"/api/sessions/{sid}")).json()["state"] != "idle":
                await anyio.sleep(0.02)
    files = DataRoot(tmp_path).trace_files(sid)
    kinds = [b.payload_type(r) for r in iter_trace(files[-1])]
    crashed = kinds.index("request_begin", kinds.index("request_end") + 1)
    assert kinds[crashed + 1] == "request_end"  # the closure resume wrote
    findings = validate_session(files, strict=True)
    assert [f for f in findings if f.rule == "V-20"] == []
