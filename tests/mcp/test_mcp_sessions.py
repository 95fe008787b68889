"""Sessions using a real MCP server (the SDK's MCPServer) over stdio and streamable HTTP:
R-MCP-1 (tools, tool_list_ready), R-MCP-2 (results, errors, a server dying mid-call, timeouts
with cancellation), R-MCP-3 (approval rules, secrets), R-MCP-4 (resume with the server gone,
replay without a server)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from enginekit import Env, collect, make_env
from mcpkit import CONNECT_MS, HttpServer, stdio_command

from engine import AbortSignal, LocalEnvironment, McpServer, Session, allow_all
from engine.llm import ScriptedLLM
from eventstore import (
    OmniMessage,
    TextPayload,
    ToolCallOutputPayload,
    ToolListReadyPayload,
    read_trace,
)
from eventstore import builders as b
from replay import resume_session
from replay.golden import areplay_trace

pytestmark = pytest.mark.anyio


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return make_env(tmp_path)


def call(name: str, args: dict[str, Any] | None = None, cid: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"name": name, "arguments": args or {}}
    if cid is not None:
        item["id"] = cid
    return {"tool_call": item}


async def run_session(
    env: Env,
    responses: list[list[dict[str, Any]]],
    servers: dict[str, McpServer],
    *,
    approve: Any = allow_all,
    rules: dict[str, str] | None = None,
    signal: AbortSignal | None = None,
    on: Any = None,
) -> tuple[Session, ScriptedLLM, list[OmniMessage]]:
    llm = ScriptedLLM({"responses": responses})
    session = await Session.create(
        llm=llm,
        environment=LocalEnvironment(env.workspace),
        root=env.root,
        workspace=env.workspace,
        mcp=servers,
        approval_rules=rules,
    )
    async with session:
        with anyio.fail_after(CONNECT_MS / 1000 + 60):
            msgs = await collect(
                session.run([b.user_text("go")], approve=approve, signal=signal), on=on
            )
    return session, llm, msgs


def outputs(msgs: list[OmniMessage]) -> dict[str, ToolCallOutputPayload]:
    return {
        m.payload.tool_call_id: m.payload
        for m in msgs
        if isinstance(m.payload, ToolCallOutputPayload)
    }


def final_text(msgs: list[OmniMessage]) -> str:
    return [m.payload.text for m in msgs if isinstance(m.payload, TextPayload)][-1]


def trace_bytes(env: Env) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(env.home.rglob("*.jsonl")))


def tool_lists(path: Path) -> list[list[Any]]:
    return [
        list(r.payload.tools)
        for r in read_trace(path).records
        if isinstance(r.payload, ToolListReadyPayload)
    ]


async def test_r_mcp_1_2_stdio_tools_results_and_errors(env: Env) -> None:
    secret = "env-secret-" + "7" * 12
    server = McpServer(
        command=stdio_command(),
        env={"MCP_SECRET": secret, "MCP_TEST_DIR": str(env.workspace)},
        connect_timeout_ms=CONNECT_MS,
    )
    session, llm, msgs = await run_session(
        env,
        [
            [
                call("t__echo", {"text": "hi"}, "c_echo"),
                call("t__picture", {}, "c_pic"),
                call("t__document", {}, "c_doc"),
                call("t__measure", {}, "c_measure"),
                call("t__add", {"a": 2, "b": 3}, "c_add"),
                call("t__broken", {"reason": "on purpose"}, "c_broken"),
                call("t__echo", {"wrong": 1}, "c_bad_args"),
                call("t__has_env", {"name": "MCP_SECRET"}, "c_env"),
            ],
            [{"text": "done"}],
        ],
        {"t": server},
    )
    # R-MCP-1: the server's tools, named NAME__tool, with description and schema, are what the
    # model was sent and what tool_list_ready recorded.
    sent = {tool.name: tool for tool in llm.requests[0].tools}
    assert sent["t__echo"].description == "Echo the text back."
    assert sent["t__echo"].parameters is not None
    assert sent["t__echo"].parameters["properties"]["text"]["type"] == "string"
    assert "exec_command" in sent  # the environment's own tools stay
    (recorded,) = tool_lists(session.trace_path)
    assert recorded == list(llm.requests[0].tools)

    out = outputs(msgs)
    assert out["c_echo"].output == "echo: hi"
    assert out["c_echo"].stop_reason == "completed"
    assert out["c_pic"].output == "a red dot"
    assert out["c_pic"].images and out["c_pic"].images[0].startswith("data:image/png;base64,")
    assert out["c_doc"].output == "[resource: file:///notes.txt]\nline 1"
    assert out["c_measure"].output == '{"unit": "cm", "width": 3}'
    assert json.loads(out["c_add"].output) == {"sum": 5}
    # isError and a protocol error (arguments the server rejects) are failed outputs.
    assert out["c_broken"].stop_reason == "failed"
    assert "broken on purpose: on purpose" in out["c_broken"].output
    assert out["c_bad_args"].stop_reason == "failed"
    assert out["c_bad_args"].output.startswith("[tool error]")
    assert out["c_env"].output == "set"
    # R-SET-4: the env value reached the server and no trace holds it.
    assert secret.encode() not in trace_bytes(env)
    # The server's stderr went to the session's scratchpad, not to the terminal.
    assert (session.scratchpad / "mcp-logs" / "t-1.log").is_file()
    assert final_text(msgs) == "done"


async def test_r_mcp_2_a_server_killed_mid_call_fails_the_call_and_is_restarted(
    env: Env,
) -> None:
    server = McpServer(
        command=stdio_command(),
        env={"MCP_TEST_DIR": str(env.workspace)},
        connect_timeout_ms=CONNECT_MS,
    )
    _, _, msgs = await run_session(
        env,
        [
            [call("t__pid", {}, "c_pid1")],
            [call("t__die", {}, "c_die")],
            [call("t__pid", {}, "c_pid2")],
            [{"text": "done"}],
        ],
        {"t": server},
    )
    out = outputs(msgs)
    died = (env.workspace / "died").read_text()
    assert out["c_pid1"].output == died
    assert out["c_die"].stop_reason == "failed"
    assert 'MCP server "t" closed the connection' in out["c_die"].output
    assert "restarted for the next call" in out["c_die"].output
    assert out["c_pid2"].stop_reason == "completed"
    assert out["c_pid2"].output not in ("", died)  # a new server process answered


async def wait_for(path: Path) -> None:
    """The server writes ``path`` (a call started, a cancellation seen); polled, with a
    deadline."""
    with anyio.fail_after(CONNECT_MS / 1000):
        while not path.exists():
            await anyio.sleep(0.02)


async def test_r_mcp_2_a_slow_call_times_out_and_the_server_is_told(
    env: Env, http_server: HttpServer
) -> None:
    (http_server.evidence / "cancelled").unlink(missing_ok=True)
    server = McpServer(
        url=http_server.url,
        headers={"X-Api-Key": http_server.key},
        timeout_ms=1500,
        connect_timeout_ms=CONNECT_MS,
    )
    _, _, msgs = await run_session(
        env, [[call("h__slow", {"seconds": 120}, "c_slow")], [{"text": "done"}]], {"h": server}
    )
    out = outputs(msgs)["c_slow"]
    assert out.stop_reason == "failed"
    assert out.output == "[tool timeout: exceeded 1500ms]"
    await wait_for(http_server.evidence / "cancelled")


async def test_r_mcp_2_a_user_abort_cancels_the_call_on_the_server(
    env: Env, http_server: HttpServer
) -> None:
    for name in ("started", "cancelled"):
        (http_server.evidence / name).unlink(missing_ok=True)
    signal = AbortSignal()
    server = McpServer(
        url=http_server.url, headers={"X-Api-Key": http_server.key}, connect_timeout_ms=CONNECT_MS
    )

    async def abort_once_the_server_runs_it() -> None:
        await wait_for(http_server.evidence / "started")
        signal.abort()

    async with anyio.create_task_group() as tg:
        tg.start_soon(abort_once_the_server_runs_it)
        _, _, msgs = await run_session(
            env, [[call("h__slow", {"seconds": 120}, "c_slow")]], {"h": server}, signal=signal
        )
    assert outputs(msgs)["c_slow"].stop_reason == "aborted", outputs(msgs)["c_slow"]
    await wait_for(http_server.evidence / "cancelled")


async def test_r_mcp_3_approval_rules_and_header_secrets_over_http(
    env: Env, http_server: HttpServer
) -> None:
    (env.workspace / "a.txt").write_text("alpha")
    server = McpServer(
        url=http_server.url,
        headers={"X-Api-Key": http_server.key},
        approval="allow",
        tools={"broken": "deny"},
        connect_timeout_ms=CONNECT_MS,
    )
    _, _, msgs = await run_session(
        env,
        [
            [
                call("h__echo", {"text": "ok"}, "c_echo"),
                call("h__broken", {"reason": "x"}, "c_broken"),
                call("h__look", {}, "c_look"),
                call("read_file", {"path": "a.txt"}, "c_read"),
                call("write_file", {"path": "b.txt", "content": "x"}, "c_write"),
            ],
            [{"text": "done"}],
        ],
        {"h": server},
        approve=None,  # no callback: whatever the rules leave open is denied
        rules={"read_file": "allow", "h__look": "ask"},
    )
    out = outputs(msgs)
    assert out["c_echo"].output == "echo: ok"  # the server's rule allows it
    assert out["c_broken"].output == "Tool call denied by policy."  # its tool rule denies it
    assert out["c_look"].output == "Tool call denied by user."  # ask -> the (absent) callback
    assert out["c_read"].output == "alpha"  # an explicit rule for a built-in tool
    assert out["c_write"].output == "Tool call denied by user."
    # R-SET-4: the header value was sent (the server requires it) and no trace holds it.
    assert http_server.key.encode() not in trace_bytes(env)


async def test_r_mcp_4_a_server_that_refuses_us_costs_its_tools_not_the_session(
    env: Env, http_server: HttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    server = McpServer(
        url=http_server.url, headers={"X-Api-Key": "wrong"}, connect_timeout_ms=CONNECT_MS
    )
    _, llm, msgs = await run_session(env, [[{"text": "no tools from h"}]], {"h": server})
    assert not [t for t in llm.requests[0].tools if t.name.startswith("h__")]
    assert final_text(msgs) == "no tools from h"
    assert any('MCP server "h" is not available' in r.getMessage() for r in caplog.records)


async def test_r_mcp_4_resume_with_the_server_gone_and_replay_without_it(env: Env) -> None:
    server = McpServer(
        command=stdio_command(),
        env={"MCP_TEST_DIR": str(env.workspace)},
        connect_timeout_ms=CONNECT_MS,
    )
    first, _, msgs = await run_session(
        env, [[call("t__echo", {"text": "one"}, "c1")], [{"text": "first done"}]], {"t": server}
    )
    assert outputs(msgs)["c1"].output == "echo: one"
    # R-MCP-4: replay needs no server — the outputs come from the recording.
    result = await areplay_trace(first.trace_path)
    assert result.matched, result

    gone = McpServer(command=[sys.executable, "-c", "raise SystemExit(3)"])
    llm = ScriptedLLM(
        {"responses": [[call("t__echo", {"text": "two"}, "c2")], [{"text": "second done"}]]}
    )
    resumed = await resume_session(
        env.root,
        first.id,
        llm=llm,
        environment=LocalEnvironment(env.workspace),
        mcp={"t": gone},
    )
    async with resumed:
        with anyio.fail_after(CONNECT_MS / 1000):
            more = await collect(resumed.run([b.user_text("again")], approve=allow_all))
    # The recorded tool is still offered (exactly as recorded); calling it fails, the run ends.
    before, after = tool_lists(resumed.trace_path)
    assert [t for t in after if t.name == "t__echo"] == [t for t in before if t.name == "t__echo"]
    out = outputs(more)["c2"]
    assert out.stop_reason == "failed"
    assert out.output.startswith('[tool error] MCP server "t" is not available')
    assert final_text(more) == "second done"
