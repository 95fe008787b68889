"""MCP servers and approval rules in the settings record (R-SET-1, R-SET-4, R-MCP-3) and a
resumed session reconnecting the recorded servers (R-SET-3, R-MCP-4), with a real stdio MCP
server (the SDK's MCPServer) as a subprocess."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from enginekit import Env, collect, make_env
from mcpkit import CONNECT_MS, SERVER, stdio_command

from engine import LocalEnvironment, McpServer, Session
from engine.llm import ScriptedLLM
from eventstore import OmniMessage, SettingsPayload, ToolCallOutputPayload, read_trace
from eventstore import builders as b
from replay import resume_session
from replay.golden import areplay_trace

pytestmark = pytest.mark.anyio

SECRET = "mcp-env-Zr71QxV4"  # R-SET-4: tests/support/secretkit.SUITE_SECRETS


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return make_env(tmp_path)


def call(name: str, args: dict[str, Any], cid: str) -> dict[str, Any]:
    return {"tool_call": {"name": name, "arguments": args, "id": cid}}


def outputs(msgs: list[OmniMessage]) -> dict[str, ToolCallOutputPayload]:
    return {
        m.payload.tool_call_id: m.payload
        for m in msgs
        if isinstance(m.payload, ToolCallOutputPayload)
    }


def settings_records(path: Path) -> list[SettingsPayload]:
    return [r.payload for r in read_trace(path).records if isinstance(r.payload, SettingsPayload)]


async def first_session(env: Env, command: list[str]) -> Session:
    """A session with server ``t`` (its env holds a secret; its tools allowed by the server's
    rule) and an explicit rule; ``approve=None``: deny-all for the rest."""
    server = McpServer(
        command=command,
        env={"MCP_SECRET": SECRET, "MCP_TEST_DIR": str(env.workspace)},
        approval="allow",
        connect_timeout_ms=CONNECT_MS,
    )
    llm = ScriptedLLM(
        {
            "responses": [
                [call("t__has_env", {"name": "MCP_SECRET"}, "c_env")],
                [{"text": "first done"}],
            ]
        }
    )
    session = await Session.create(
        llm=llm,
        environment=LocalEnvironment(env.workspace),
        root=env.root,
        workspace=env.workspace,
        mcp={"t": server},
        approval_rules={"read_file": "allow"},
    )
    async with session:
        with anyio.fail_after(CONNECT_MS / 1000 + 60):
            msgs = await collect(session.run([b.user_text("go")], approve=None))
    assert outputs(msgs)["c_env"].output == "set"
    return session


async def resumed_run(env: Env, sid: str, **options: Any) -> tuple[Session, list[OmniMessage]]:
    llm = ScriptedLLM(
        {
            "responses": [
                [
                    call("t__echo", {"text": "again"}, "c_echo"),
                    call("t__has_env", {"name": "MCP_SECRET"}, "c_env2"),
                    call("write_file", {"path": "x.txt", "content": "x"}, "c_write"),
                ],
                [{"text": "second done"}],
            ]
        }
    )
    resumed = await resume_session(
        env.root, sid, llm=llm, environment=LocalEnvironment(env.workspace), **options
    )
    async with resumed:
        with anyio.fail_after(CONNECT_MS / 1000 + 60):
            msgs = await collect(resumed.run([b.user_text("again")], approve=None))
    return resumed, msgs


async def test_r_set_1_the_servers_and_rules_are_recorded_without_secrets(env: Env) -> None:
    session = await first_session(env, stdio_command())
    (settings,) = settings_records(session.trace_path)
    # The command, never the env values (R-SET-4); the server's rule and the explicit one.
    assert settings.mcp == {
        "t": {"transport": "stdio", "command": stdio_command(), "connect_timeout_ms": CONNECT_MS}
    }
    assert settings.approval_rules == {"t__*": "allow", "read_file": "allow"}
    assert settings.approval == "deny-all"
    assert session.state.settings == settings
    assert not any(SECRET.encode() in p.read_bytes() for p in env.home.rglob("*.jsonl"))


async def test_r_mcp_4_resume_reconnects_the_recorded_server_with_the_recorded_rules(
    env: Env,
) -> None:
    first = await first_session(env, stdio_command())
    # No mcp= and no approval_rules=: both come from the settings record (R-SET-3).
    resumed, msgs = await resumed_run(env, first.id)
    out = outputs(msgs)
    assert out["c_echo"].output == "echo: again"  # reconnected; allowed by the recorded rule
    assert out["c_env2"].output == "unset"  # a record holds no env values
    assert out["c_write"].output == "Tool call denied by user."  # deny-all stands
    # Nothing changed: the resumed run wrote no second settings record.
    assert len(settings_records(resumed.trace_path)) == 1
    # R-MCP-4: replay needs no server.
    assert (await areplay_trace(resumed.trace_path)).matched


async def test_r_mcp_4_a_recorded_server_that_is_gone_fails_its_tools_not_the_session(
    env: Env, tmp_path: Path
) -> None:
    copy = tmp_path / "server_copy.py"
    shutil.copy(SERVER, copy)
    first = await first_session(env, [sys.executable, str(copy), "stdio"])
    copy.unlink()  # the server is gone
    _, msgs = await resumed_run(env, first.id)
    out = outputs(msgs)
    assert out["c_echo"].stop_reason == "failed"
    assert out["c_echo"].output.startswith('[tool error] MCP server "t" is not available')
    assert [m.payload.text for m in msgs if hasattr(m.payload, "text")][-1] == "second done"


async def test_r_set_3_an_explicit_mcp_argument_overrides_the_record(env: Env) -> None:
    first = await first_session(env, stdio_command())
    server = McpServer(
        command=stdio_command(), env={"MCP_SECRET": SECRET}, connect_timeout_ms=CONNECT_MS
    )
    resumed, msgs = await resumed_run(
        env, first.id, mcp={"t": server}, approval_rules={"t__echo": "allow"}
    )
    out = outputs(msgs)
    assert out["c_echo"].output == "echo: again"
    assert out["c_env2"].output == "Tool call denied by user."  # the recorded t__* rule is gone
    # The change is recorded (R-SET-2b), still without the secret.
    last = settings_records(resumed.trace_path)[-1]
    assert last.approval_rules == {"t__echo": "allow"}
    assert not any(SECRET.encode() in p.read_bytes() for p in env.home.rglob("*.jsonl"))
