"""The turn-end fdatasync of ``fsync="turn"`` runs in a worker thread, off the event loop that
also serves other sessions (issue 19), yet each turn is durable before the next request starts
(R-TRACE-16) and a failed sync still fails the run and breaks the session (R-TRACE-15)."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from engine import Session, SessionBroken, allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import AbortPayload, RequestBeginPayload, RequestEndPayload, decode
from eventstore.builders import user_text

pytestmark = pytest.mark.anyio

SCRIPT: dict[str, Any] = {
    "responses": [
        [{"tool_call": {"name": "t", "arguments": {}, "id": f"c{i}", "result": {"output": "ok"}}}]
        for i in range(3)
    ]
    + [[{"text": "done"}]],
    "tools": [{"name": "t", "description": "t"}],
}


async def _session(tmp_path: Path) -> Session:
    llm = ScriptedLLM(SCRIPT)
    return await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        root=tmp_path / "root",
        workspace=tmp_path,
        fsync="turn",
    )


def _kinds(data: bytes) -> list[type]:
    return [type(decode(line).payload) for line in data.split(b"\n") if line]


async def test_turn_end_sync_runs_off_the_loop_before_the_next_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.fdatasync
    loop_thread = threading.get_ident()
    synced: list[tuple[bool, list[type]]] = []  # (on the loop thread, the file's records)
    session = await _session(tmp_path)

    def fdatasync(fd: int) -> None:
        real(fd)
        trace = next((tmp_path / "root").rglob("*.jsonl"))  # one file: no rotation here
        synced.append((threading.get_ident() == loop_thread, _kinds(trace.read_bytes())))

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    async with session:
        async for _ in session.run([user_text("go")], approve=allow_all):
            pass
    monkeypatch.undo()
    assert len(synced) == 4  # one per request_end
    for k, (on_loop, kinds) in enumerate(synced):
        assert not on_loop
        # Synced: the k-th turn's end, and the next request had not begun.
        assert kinds.count(RequestEndPayload) == k + 1
        assert kinds.count(RequestBeginPayload) == k + 1


async def test_failed_turn_end_sync_fails_the_run_and_breaks_the_session_r_trace_15(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = await _session(tmp_path)

    def fdatasync(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    async with session:
        stream = [m async for m in session.run([user_text("go")], approve=allow_all)]
        last = stream[-1].payload
        assert isinstance(last, AbortPayload)
        assert last.reason.startswith("trace write failed: ")
        assert sum(isinstance(m.payload, RequestBeginPayload) for m in stream) == 1
        with pytest.raises(SessionBroken):
            async for _ in session.run([user_text("again")], approve=allow_all):
                pass
    monkeypatch.undo()
    trace = next((tmp_path / "root").rglob("*.jsonl"))
    # The turn whose sync failed is taken back out of the file (not durable: not written).
    assert RequestEndPayload not in _kinds(trace.read_bytes())
