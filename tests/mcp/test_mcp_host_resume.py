"""Hosts reconnect a session's recorded MCP servers (R-SET-3, R-MCP-4): ``penguin serve`` after a
restart and ``penguin resume`` take the servers the settings record names, with the env values of
the configured server of that name (never from the trace, R-SET-4); a recorded server the
configuration no longer has is gone — its tools fail, the session goes on, and no command only a
trace names is run."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from clikit import invoke
from mcpkit import CONNECT_MS, SERVER, stdio_command
from serverkit import AUTH, TOKEN, scripted

from engine import McpServer
from eventstore import DataRoot, SettingsPayload, ToolCallOutputPayload, read_trace
from penguin.server import create_app

SECRET = "mcp-env-Zr71QxV4"  # R-SET-4: tests/support/secretkit.SUITE_SECRETS

CALLS = [
    [
        {"tool_call": {"name": "t__has_env", "arguments": {"name": "MCP_SECRET"}, "id": "c_env"}},
        {"tool_call": {"name": "t__echo", "arguments": {"text": "hi"}, "id": "c_echo"}},
    ],
    [{"text": "done"}],
]


def records(home: Path, sid: str) -> list[Any]:
    return read_trace(DataRoot(home).trace_files(sid)).records


def outputs(home: Path, sid: str) -> dict[str, ToolCallOutputPayload]:
    """The outputs of the last run's two calls (a resumed script's ids may be renumbered)."""
    found = [r.payload for r in records(home, sid) if isinstance(r.payload, ToolCallOutputPayload)]
    return dict(zip(("c_env", "c_echo"), found[-2:], strict=True))


@asynccontextmanager
async def server(tmp_path: Path, servers: dict[str, McpServer]) -> AsyncIterator[httpx.AsyncClient]:
    app: Any = create_app(
        tmp_path / "home",
        token=TOKEN,
        workspace=tmp_path,
        watch=False,
        llm_factory=scripted(*CALLS),
        approval="allow-all",
        mcp_servers=servers,
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://testserver", headers=AUTH, timeout=120
        ) as c:
            yield c


async def run_task(c: httpx.AsyncClient, sid: str) -> None:
    r = await c.post(f"/api/sessions/{sid}/tasks", json={"input": [{"type": "text", "text": "go"}]})
    assert r.status_code == 202, r.text
    with anyio.fail_after(CONNECT_MS / 1000):
        while (await c.get(f"/api/sessions/{sid}")).json()["state"] != "idle":
            await anyio.sleep(0.05)


@pytest.mark.anyio
async def test_r_mcp_4_penguin_serve_restarted_reconnects_the_recorded_servers(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    configured = {
        "t": McpServer(
            command=stdio_command(), env={"MCP_SECRET": SECRET}, connect_timeout_ms=CONNECT_MS
        ),
        "other": McpServer(command=stdio_command(), connect_timeout_ms=CONNECT_MS),
    }
    async with server(tmp_path, configured) as c:
        # The session uses "t" only, with a rule of its own (deny its echo).
        r = await c.post(
            "/api/sessions",
            json={"approval": "deny-all", "mcp": {"t": {}}, "approval_rules": {"t__*": "allow"}},
        )
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        await run_task(c, sid)
    first = outputs(home, sid)
    assert first["c_env"].output == "set" and first["c_echo"].output == "echo: hi"

    # A new server process on the same data root and config: the recorded server, with the
    # configured env value; the recorded rules (the mode is deny-all: only t__* is allowed).
    async with server(tmp_path, configured) as c:
        await run_task(c, sid)
    second = outputs(home, sid)
    assert second["c_env"].output == "set"
    assert second["c_echo"].output == "echo: hi"
    tools = [
        r.payload for r in records(home, sid) if type(r.payload).__name__ == "ToolListReadyPayload"
    ]
    assert not any(t.name.startswith("other__") for t in tools[-1].tools)  # not recorded: not used
    settings = [r.payload for r in records(home, sid) if isinstance(r.payload, SettingsPayload)]
    assert len(settings) == 1  # the same settings came back: nothing new to record

    # Restarted without the server in the config: it is gone — its tools fail, the task ends.
    async with server(tmp_path, {}) as c:
        await run_task(c, sid)
    third = outputs(home, sid)
    assert third["c_echo"].stop_reason == "failed"
    assert "not configured here" in third["c_echo"].output
    assert [r for r in records(home, sid) if getattr(r.payload, "text", None) == "done"][-1]
    assert not any(SECRET.encode() in p.read_bytes() for p in home.rglob("*.jsonl"))


def test_r_mcp_4_penguin_resume_reconnects_with_the_configured_env(tmp_path: Path) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    config = home / "config.toml"
    table = (
        "[mcp.servers.t]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f'args = [{json.dumps(str(SERVER))}, "stdio"]\n'
        'approval = "allow"\n'
        "connect_timeout_ms = 120000\n"
        f'[mcp.servers.t.env]\nMCP_SECRET = "{SECRET}"\n'
    )
    config.write_text(table)
    script = tmp_path / "script.json"
    script.write_text(json.dumps(CALLS))
    first = invoke("--home", home, "run", "-m", "go", "--workspace", ws, "--script", script)
    assert first.exit_code == 0, first.output
    (info,) = DataRoot(home).sessions()
    sid = info.session_id
    assert outputs(home, sid)["c_env"].output == "set"

    second = invoke("--home", home, "resume", sid, "-m", "again", "--script", script)
    assert second.exit_code == 0, second.output
    assert "mcp t" in second.output  # the restored settings line names the server
    assert outputs(home, sid)["c_env"].output == "set"  # the env value came from config.toml

    # The server is no longer configured: never started from the trace; its tools fail.
    config.write_text("")
    third = invoke("--home", home, "resume", sid, "-m", "again", "--script", script)
    assert third.exit_code == 0, third.output
    gone = outputs(home, sid)["c_echo"]
    assert gone.stop_reason == "failed" and "not configured here" in gone.output
    assert not any(SECRET.encode() in p.read_bytes() for p in home.rglob("*.jsonl"))
