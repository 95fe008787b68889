"""`penguin serve` as a process: SIGTERM (R-SRV-14) and the public-bind refusal (R-SRV-1)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest
from serverkit import AUTH, Reader, is_server, payload_type, spawn_server

from eventstore import iter_trace
from eventstore.builders import payload_type as kind_of
from replay import validate_session

pytestmark = pytest.mark.anyio


async def test_r_srv_14_sigterm_aborts_the_task_and_exits_0(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"responses": [[{"text": "thinking..."}, {"sleep_ms": 600_000}]]}))
    root = tmp_path / "root"
    child = await spawn_server(root, script, ws)
    async with httpx.AsyncClient(base_url=child.base, headers=AUTH, timeout=30) as c:
        sid = (await c.post("/api/sessions", json={})).json()["id"]
        async with c.stream("GET", f"/api/sessions/{sid}/stream") as resp:
            rd = Reader(resp)
            await rd.next()
            assert (
                await c.post(
                    f"/api/sessions/{sid}/tasks", json={"input": [{"type": "text", "text": "hi"}]}
                )
            ).status_code == 202
            await rd.until(lambda e: payload_type(e) == "text")
            start = time.monotonic()
            child.process.send_signal(signal.SIGTERM)
            seen = []
            # The stream ends cleanly (issue 29): EOFError, never a broken chunked body
            # (httpx.RemoteProtocolError).
            with contextlib.suppress(EOFError):
                while True:
                    seen.append(await rd.next())
        with anyio.fail_after(10):
            code = await child.process.wait()
        assert code == 0 and time.monotonic() - start < 10
    assert any(payload_type(e) == "abort" for e in seen)
    records = [r for p in sorted(root.rglob(f"{sid}_*.jsonl")) for r in iter_trace(p)]
    assert "abort" in [kind_of(r) for r in records]
    findings = validate_session(sorted(root.rglob(f"{sid}_*.jsonl")))
    assert [f for f in findings if f.severity == "error"] == []


def test_r_srv_1_public_bind_without_token_is_refused(tmp_path: Path) -> None:
    exe = os.path.join(os.path.dirname(sys.executable), "penguin")
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"responses": [[{"text": "x"}]]}))
    env = {k: v for k, v in os.environ.items() if k != "PENGUIN_SERVER_TOKEN"}
    r = subprocess.run(
        [
            exe,
            "--home",
            str(tmp_path),
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--script",
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert r.returncode == 2 and "without an explicit --token" in r.stderr


def test_serve_raises_the_gc_thresholds_while_serving_and_restores_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full collection over many sessions' projections stalls every stream (p99): ``serve``
    collects less often while it runs, and gives the caller's thresholds back afterwards."""
    import gc

    import penguin.server._serve as serve_module

    seen: list[tuple[int, ...]] = []

    def fake_run(coro: object) -> None:
        seen.append(gc.get_threshold())
        coro.close()  # type: ignore[attr-defined]

    monkeypatch.setattr(serve_module.asyncio, "run", fake_run)
    before = gc.get_threshold()
    serve_module.serve(tmp_path / "home", port=0, announce=lambda url: None)
    assert seen == [serve_module.SERVE_GC_THRESHOLDS]
    assert serve_module.SERVE_GC_THRESHOLDS[0] > before[0]
    assert gc.get_threshold() == before


@pytest.mark.parametrize("configured", [None, "false"])
async def test_r_snap_1_serve_takes_snapshots_unless_the_config_says_false(
    tmp_path: Path, configured: str | None
) -> None:
    """``snapshots = false`` in config.toml switches them off for `penguin serve` as it does for
    `run` and `chat` (it was ignored: the server's sessions took snapshots regardless)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "script.json"
    call = {"tool_call": {"name": "echo", "arguments": {}, "result": {"output": "ok"}}}
    script.write_text(
        json.dumps(
            {
                "responses": [[call], [{"text": "done"}]],
                "tools": [{"name": "echo", "description": "echo"}],
            }
        )
    )
    root = tmp_path / "root"
    if configured is not None:
        root.mkdir()
        (root / "config.toml").write_text(f"[defaults]\nsnapshots = {configured}\n")
    child = await spawn_server(root, script, ws)
    try:
        async with httpx.AsyncClient(base_url=child.base, headers=AUTH, timeout=30) as c:
            sid = (await c.post("/api/sessions", json={})).json()["id"]
            async with c.stream("GET", f"/api/sessions/{sid}/stream") as resp:
                rd = Reader(resp)
                await rd.next()
                body = {"input": [{"type": "text", "text": "go"}]}
                assert (await c.post(f"/api/sessions/{sid}/tasks", json=body)).status_code == 202
                await rd.until(is_server("task_state", state="idle"))
    finally:
        child.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            await child.process.wait()
    kinds = [kind_of(r) for p in sorted(root.rglob(f"{sid}_*.jsonl")) for r in iter_trace(p)]
    assert "tool_call_output" in kinds
    assert ("workspace_snapshot" in kinds) is (configured is None)
