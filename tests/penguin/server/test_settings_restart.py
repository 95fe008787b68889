"""A real `penguin serve` restarted between two tasks changes nothing a session does (SPEC §23:
R-SET-1…R-SET-4, R-SET-6).

Before settings were records, a session created ``deny-all`` with ``max_turns: 1`` on a server
started ``--approve allow-all`` came back after a restart allowing every tool call, with the
default turn limit and compaction, and sent its model to whatever endpoint the new server had.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from providerkit import SSEServer, recording, sse
from serverkit import AUTH, TOKEN, Child, ready

from eventstore import ApprovalDecisionPayload, SettingsPayload, TextPayload, iter_trace
from projections import markers as mk
from replay import validate_session

pytestmark = pytest.mark.anyio

KEY = "sk-restart-Qm83Zt5Lp0"  # R-SET-4: must never reach a trace


async def spawn(root: Path, ws: Path, base_url: str) -> Child:
    exe = os.path.join(os.path.dirname(sys.executable), "penguin")
    args = [exe, "--home", str(root), "serve", "--port", "0", "--token", TOKEN]
    args += ["--llm", "openai", "--model", "gpt-x", "--base-url", base_url]
    args += ["--approve", "allow-all", "--workspace", str(ws)]
    env = {**os.environ, "OPENAI_API_KEY": KEY}
    proc = await anyio.open_process(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    )
    return await ready(proc)


async def stop(child: Child) -> None:
    child.process.send_signal(signal.SIGTERM)
    with anyio.fail_after(20):
        assert await child.process.wait() == 0


async def run_task(c: httpx.AsyncClient, sid: str, text: str) -> str:
    r = await c.post(f"/api/sessions/{sid}/tasks", json={"input": [{"type": "text", "text": text}]})
    assert r.status_code == 202, r.text
    task_id: str = r.json()["task_id"]
    with anyio.fail_after(60):
        while True:
            row = (await c.get(f"/api/sessions/{sid}")).json()
            if row["state"] == "idle":
                return task_id
            await anyio.sleep(0.05)


def records(root: Path, sid: str) -> list[Any]:
    return [r for p in sorted(root.rglob(f"{sid}_*.jsonl")) for r in iter_trace(p)]


async def test_restart_keeps_deny_all_max_turns_compaction_and_the_endpoint(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    root = tmp_path / "home"
    tools = recording("openai_parallel_tools.sse")
    with SSEServer() as first, SSEServer() as second:
        first.queue(sse(tools), sse(tools))
        second.queue(sse(tools), sse(tools))
        child = await spawn(root, ws, f"{first.url}/v1")
        async with httpx.AsyncClient(base_url=child.base, headers=AUTH, timeout=30) as c:
            body = {
                "approval": "deny-all",
                "max_turns": 1,
                "compaction": {"max_context_length": 50_000, "mode": "discard"},
            }
            sid = (await c.post("/api/sessions", json=body)).json()["id"]
            task1 = await run_task(c, sid, "read both files")
        await stop(child)
        # The new server defaults to allow-all and to another endpoint.
        child = await spawn(root, ws, f"{second.url}/v1")
        try:
            async with httpx.AsyncClient(base_url=child.base, headers=AUTH, timeout=30) as c:
                row = (await c.get(f"/api/sessions/{sid}")).json()
                assert row["approval"] == "deny-all"
                task2 = await run_task(c, sid, "again")
        finally:
            await stop(child)
        first_requests, second_requests = len(first.requests), len(second.requests)
    # The model endpoint: both tasks went to the recorded one.
    assert (first_requests, second_requests) == (2, 0)
    # R-SET-6: task ids continue across the restart.
    assert (task1, task2) == (f"{sid}.1", f"{sid}.2")
    recs = records(root, sid)
    decisions = [r.payload.decision for r in recs if isinstance(r.payload, ApprovalDecisionPayload)]
    assert decisions and set(decisions) == {"deny"}  # deny-all kept: nothing ran
    notices = [
        r
        for r in recs
        if isinstance(r.payload, TextPayload) and r.payload.text == mk.max_turns_notice(1)
    ]
    assert len(notices) == 2  # max_turns 1 kept
    settings = [r.payload for r in recs if isinstance(r.payload, SettingsPayload)]
    assert settings[-1].approval == "deny-all" and settings[-1].max_turns == 1
    assert isinstance(settings[-1].compaction, dict)
    assert settings[-1].compaction["mode"] == "discard"
    assert settings[-1].compaction["max_context_length"] == 50_000
    assert settings[-1].model == {
        "provider": "openai",
        "model_id": "gpt-x",
        "base_url": f"{first.url}/v1",
    }
    assert len(settings) == 1  # nothing changed, so nothing was recorded again (R-SET-2b)
    files = sorted(root.rglob(f"{sid}_*.jsonl"))
    for path in files:
        assert KEY not in path.read_text(encoding="utf-8")  # R-SET-4
    # R-SET-6: inputs and settings are stamped when written, so neither goes back in time
    # (V-20) across the restart.
    late = [f for f in validate_session(files, strict=True) if f.rule == "V-20"]
    lines = {p: p.read_text(encoding="utf-8").splitlines() for p in files}
    stamped = [lines[f.path][f.line - 1] for f in late]
    assert not [x for x in stamped if '"settings"' in x or '"type":"text","role":"user"' in x]
