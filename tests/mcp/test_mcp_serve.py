"""``penguin mcp serve [--http]``: the read-only trace tools as an MCP server (R-MCP-5), reached
with the engine's own MCP client (stdio) and over HTTP (token, Host/Origin)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from enginekit import Env, collect, make_env
from mcpkit import CONNECT_MS

from engine import AbortSignal, McpEnvironment, McpServer, Session, allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import ToolCallOutputPayload
from eventstore import builders as b

pytestmark = pytest.mark.anyio

TOOLS = {
    "list_sessions",
    "search_sessions",
    "transcript",
    "request_at",
    "validate",
    "diff",
    "sql",
}


async def recorded_session(env: Env, answer: str) -> str:
    script = {
        "responses": [
            [{"tool_call": {"name": "look", "arguments": {}, "result": {"output": "a pebble"}}}],
            [{"text": answer}],
        ],
        "tools": [{"name": "look", "description": "Look around."}],
    }
    llm = ScriptedLLM(script)
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        root=env.root,
        workspace=env.workspace,
    )
    async with session:
        await collect(session.run([b.user_text("what is there?")], approve=allow_all))
    return session.id


async def call(environment: McpEnvironment, name: str, **args: Any) -> ToolCallOutputPayload:
    msg = b.tool_call(name, json.dumps(args), f"call-{name}")
    out = [m async for m in environment.execute(msg, signal=AbortSignal())][-1]
    assert isinstance(out.payload, ToolCallOutputPayload)
    return out.payload


async def test_r_mcp_5_the_trace_tools_over_stdio(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    first = await recorded_session(env, "a pebble, nothing else")
    second = await recorded_session(env, "only a pebble")
    server = McpServer(
        command=[sys.executable, "-m", "penguin", "--home", str(env.home), "mcp", "serve"],
        connect_timeout_ms=CONNECT_MS,
    )
    async with McpEnvironment({"p": server}, workspace=env.workspace) as tools:
        with anyio.fail_after(CONNECT_MS / 1000 + 60):
            listed = await tools.list_tools()
            assert {t.name.removeprefix("p__") for t in listed} == TOOLS
            assert all(tools.tool_permission(t.name) == "r" for t in listed)  # read-only hint

            sessions = json.loads((await call(tools, "p__list_sessions")).output)
            assert {s["session_id"] for s in sessions} == {first, second}

            # The session index's full-text search (as `penguin search`): FTS5 syntax, each
            # hit's FILE:ORDINAL ready for request_at.
            found = json.loads(
                (await call(tools, "p__search_sessions", text="NOTHING ELSE")).output
            )
            assert [hit["session_id"] for hit in found] == [first]
            assert [s["text"] for s in found[0]["snippet"] if s["match"]] == ["nothing", "else"]
            phrase = json.loads(
                (await call(tools, "p__search_sessions", text='"only a" OR else')).output
            )
            assert [hit["session_id"] for hit in phrase] == [second, first]
            assert found[0]["kind"] == "assistant"
            at = await call(tools, "p__request_at", session=first, position=found[0]["at"])
            assert at.stop_reason != "failed", at.output
            bad = await call(tools, "p__search_sessions", text='"unclosed')
            assert bad.stop_reason == "failed" and "invalid search query" in bad.output

            transcript = (await call(tools, "p__transcript", session=first)).output
            assert "what is there?" in transcript and "a pebble, nothing else" in transcript

            request = json.loads(
                (await call(tools, "p__request_at", session=first, position="1:3")).output
            )
            assert "request" in json.dumps(request)

            verdict = json.loads((await call(tools, "p__validate", session=second)).output)
            assert verdict["valid"] is True

            difference = json.loads((await call(tools, "p__diff", a=first, b=second)).output)
            assert difference["equal"] is False

            rows = json.loads(
                (await call(tools, "p__sql", query="SELECT count(*) AS n FROM sessions")).output
            )
            assert rows["rows"] == [{"n": 2}]
            # Read-only: a statement that writes is refused, and nothing is written.
            target = tmp_path / "leak.csv"
            refused = await call(tools, "p__sql", query=f"COPY sessions TO '{target}'")
            assert refused.stop_reason == "failed"
            assert not target.exists()

            unknown = await call(tools, "p__transcript", session="no-such-session")
            assert unknown.stop_reason == "failed"
            assert "no session match" in unknown.output


@pytest.fixture(scope="module")
def http_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """``penguin mcp serve --http --port 0 --token T`` on a data root with one session."""
    home = tmp_path_factory.mktemp("mcp-serve-home")
    env = Env(home=home / "data", workspace=home)
    anyio.run(recorded_session, env, "served")
    token = "token-" + os.urandom(12).hex()
    command = [sys.executable, "-m", "penguin", "--home", str(env.home), "mcp", "serve"]
    proc = subprocess.Popen(
        [*command, "--http", "--port", "0", "--token", token],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # the server's own "serving <url>" line: it listens
        found = re.search(r"serving (http://127\.0\.0\.1:\d+/mcp)", line)
        assert found, line
        yield found.group(1), token, env.home
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def test_r_mcp_5_http_needs_the_token(http_serve: tuple[str, str, Path]) -> None:
    url, token, _ = http_serve
    missing = httpx.post(url, json=INIT, headers=ACCEPT)
    assert missing.status_code == 401
    wrong = httpx.post(url, json=INIT, headers={**ACCEPT, "Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    right = httpx.post(url, json=INIT, headers={**ACCEPT, "Authorization": f"Bearer {token}"})
    assert right.status_code == 200
    assert "penguin-traces" in right.text


def test_r_mcp_5_http_refuses_other_hosts_and_origins(http_serve: tuple[str, str, Path]) -> None:
    """DNS rebinding: a page on attacker.example resolved to 127.0.0.1 sends its own Host and
    Origin; both are refused before the token is even looked at."""
    url, token, _ = http_serve
    auth = {**ACCEPT, "Authorization": f"Bearer {token}"}
    rebound = httpx.post(url, json=INIT, headers={**auth, "Host": "attacker.example"})
    assert rebound.status_code == 421
    cross = httpx.post(url, json=INIT, headers={**auth, "Origin": "http://attacker.example"})
    assert cross.status_code == 403
    port = url.split(":")[2].split("/")[0]
    same = httpx.post(url, json=INIT, headers={**auth, "Origin": f"http://localhost:{port}"})
    assert same.status_code == 200


async def test_r_mcp_5_http_with_the_engine_client(http_serve: tuple[str, str, Path]) -> None:
    url, token, home = http_serve
    server = McpServer(
        url=url, headers={"Authorization": f"Bearer {token}"}, connect_timeout_ms=CONNECT_MS
    )
    async with McpEnvironment({"p": server}, workspace=home) as tools:
        with anyio.fail_after(CONNECT_MS / 1000):
            await tools.list_tools()
            sessions = json.loads((await call(tools, "p__list_sessions", limit=5)).output)
    assert len(sessions) == 1
