"""MCP servers in ``penguin serve``'s session body (R-MCP-1, R-MCP-3, R-SET-4): a session names
the configured servers or an HTTP one, with approval rules; a request never names a command."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcpkit import CONNECT_MS, HttpServer
from serverkit import AUTH, TOKEN, scripted

from engine import McpServer
from eventstore import DataRoot, ToolCallOutputPayload, ToolListReadyPayload, read_trace
from penguin.server import create_app

pytestmark = pytest.mark.anyio

CALLS = [
    [
        {"tool_call": {"name": "h__echo", "arguments": {"text": "served"}, "id": "c_echo"}},
        {"tool_call": {"name": "h__look", "arguments": {}, "id": "c_look"}},
    ],
    [{"text": "done"}],
]


@pytest.fixture
async def client(tmp_path: Path, http_server: HttpServer) -> AsyncIterator[httpx.AsyncClient]:
    configured = McpServer(
        url=http_server.url,
        headers={"X-Api-Key": http_server.key},
        connect_timeout_ms=CONNECT_MS,
    )
    app: Any = create_app(
        tmp_path / "home",
        token=TOKEN,
        workspace=tmp_path,
        watch=False,
        llm_factory=scripted(*CALLS),
        approval="deny-all",
        mcp_servers={"h": configured},
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://testserver", headers=AUTH, timeout=120
        ) as c:
            yield c


async def run_task(
    client: httpx.AsyncClient, home: Path, sid: str
) -> dict[str, ToolCallOutputPayload]:
    r = await client.post(
        f"/api/sessions/{sid}/tasks", json={"input": [{"type": "text", "text": "go"}]}
    )
    assert r.status_code == 202, r.text
    with anyio.fail_after(CONNECT_MS / 1000):
        while (await client.get(f"/api/sessions/{sid}")).json()["state"] != "idle":
            await anyio.sleep(0.05)
    return {
        rec.payload.tool_call_id: rec.payload
        for rec in records(home, sid)
        if isinstance(rec.payload, ToolCallOutputPayload)
    }


def records(home: Path, sid: str) -> list[Any]:
    return read_trace(DataRoot(home).trace_files(sid)).records


async def test_r_mcp_1_a_session_gets_the_configured_servers_with_its_own_rules(
    client: httpx.AsyncClient, http_server: HttpServer, tmp_path: Path
) -> None:
    # The configured server "h", its tools allowed by the body's rules (the mode is deny-all),
    # one tool denied by a tool rule.
    body = {"mcp": {"h": {"approval": "allow", "tools": {"look": "deny"}}}}
    r = await client.post("/api/sessions", json=body)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    out = await run_task(client, tmp_path / "home", sid)
    assert out["c_echo"].output == "echo: served"
    assert out["c_look"].output == "Tool call denied by policy."
    tools = next(
        rec.payload.tools
        for rec in records(tmp_path / "home", sid)
        if isinstance(rec.payload, ToolListReadyPayload)
    )
    assert "h__echo" in {t.name for t in tools}
    # R-SET-4: the configured header value reached the server and is in no trace.
    traces = (tmp_path / "home").rglob("*.jsonl")
    assert all(http_server.key.encode() not in p.read_bytes() for p in traces)


async def test_r_mcp_1_an_http_server_given_in_the_body(
    client: httpx.AsyncClient, http_server: HttpServer, tmp_path: Path
) -> None:
    body = {
        "mcp": {"h": {"url": http_server.url, "headers": {"X-Api-Key": http_server.key}}},
        "approval_rules": {"h__*": "allow"},
    }
    r = await client.post("/api/sessions", json=body)
    assert r.status_code == 201, r.text
    out = await run_task(client, tmp_path / "home", r.json()["id"])
    assert out["c_echo"].output == "echo: served"
    assert out["c_look"].output == "looked"


@pytest.mark.parametrize(
    ("mcp", "error"),
    [
        ({"fs": {}}, "is not configured"),
        ({"x": {"command": ["rm", "-rf", "/"]}}, "command"),  # never a command over HTTP
        ({"x": {"url": "ftp://h/"}}, "http"),
        ({"h": {"approval": "sometimes"}}, "approval"),
    ],
)
async def test_a_bad_mcp_body_is_refused(
    client: httpx.AsyncClient, mcp: dict[str, Any], error: str
) -> None:
    r = await client.post("/api/sessions", json={"mcp": mcp})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_body"
    assert error in r.json()["error"]["message"]
