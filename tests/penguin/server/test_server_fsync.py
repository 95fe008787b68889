"""`penguin serve --fsync` (R-TRACE-16): the server's sessions, created or resumed, write with
the policy it was given; the default stays ``turn``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from serverkit import Reader, Served, is_server, scripted, served

pytestmark = pytest.mark.anyio

TEXT = {"input": [{"type": "text", "text": "hi"}]}


async def _task(s: Served, sid: str) -> None:
    async with s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
        rd = Reader(resp)
        await rd.next()
        r = await s.post(f"/api/sessions/{sid}/tasks", TEXT)
        assert r.status_code == 202, r.text
        await rd.until(is_server("task_state", state="idle"))


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The file descriptors ``fdatasync`` was called on."""
    calls: list[int] = []
    real = os.fdatasync

    def counted(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counted)
    return calls


async def test_r_trace_16_default_policy_syncs_each_turn(tmp_path: Path, syncs: list[int]) -> None:
    llm = scripted([{"text": "a"}])
    async with served(tmp_path, llm_factory=llm, approval="allow-all") as s:
        await _task(s, await s.new_session())
    assert syncs, "the default policy (turn) makes each turn's end durable"


async def test_r_trace_16_fsync_never_for_created_and_resumed_sessions(
    tmp_path: Path, syncs: list[int]
) -> None:
    llm = scripted([{"text": "a"}], [{"text": "b"}])
    opts: dict[str, Any] = {"llm_factory": llm, "approval": "allow-all", "fsync": "never"}
    async with served(tmp_path, **opts) as s:
        sid = await s.new_session()
        await _task(s, sid)
    async with served(tmp_path, **opts) as s2:
        await _task(s2, sid)  # resumed from its trace by this server
        r = await s2.client.get(f"/api/sessions/{sid}")
        assert r.json()["turns"] == 2
    assert syncs == []
