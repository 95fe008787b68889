"""The CLI uses the MCP servers of config.toml (R-MCP-1): ``penguin run`` and ``penguin resume``
offer their tools, and a server that is gone on resume costs its tools, not the session."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from clikit import invoke
from mcpkit import SERVER

from eventstore import DataRoot, ToolCallOutputPayload, read_trace


def outputs(home: Path) -> dict[str, ToolCallOutputPayload]:
    root = DataRoot(home)
    (info,) = root.sessions()
    records = read_trace(root.trace_files(info.session_id)).records
    return {
        r.payload.tool_call_id: r.payload
        for r in records
        if isinstance(r.payload, ToolCallOutputPayload)
    }


def test_r_mcp_1_penguin_run_and_resume_use_the_configured_servers(tmp_path: Path) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    config = home / "config.toml"
    config.write_text(
        '[approval_rules]\n"t__look" = "deny"\n\n'
        "[mcp.servers.t]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f'args = [{json.dumps(str(SERVER))}, "stdio"]\n'
        'approval = "allow"\n'
        "connect_timeout_ms = 120000\n"
    )
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                [
                    {"tool_call": {"name": "t__echo", "arguments": {"text": "cli"}, "id": "c1"}},
                    {"tool_call": {"name": "t__look", "arguments": {}, "id": "c_look"}},
                ],
                [{"text": "done"}],
            ]
        )
    )
    first = invoke("--home", home, "run", "-m", "go", "--workspace", ws, "--script", script)
    assert first.exit_code == 0, first.output
    assert outputs(home)["c1"].output == "echo: cli"
    assert outputs(home)["c_look"].output == "Tool call denied by policy."  # [approval_rules]

    # The server is gone from the config: the resumed session keeps the recorded tool, whose
    # call fails; the run itself completes.
    config.write_text('[mcp.servers.t]\ncommand = "/nonexistent/mcp-server"\n')
    script.write_text(
        json.dumps(
            [
                [{"tool_call": {"name": "t__echo", "arguments": {"text": "again"}, "id": "c2"}}],
                [{"text": "still here"}],
            ]
        )
    )
    second = invoke("--home", home, "resume", "-m", "again", "--script", script)
    assert second.exit_code == 0, second.output
    gone = outputs(home)["c2"]
    assert gone.stop_reason == "failed"
    assert 'MCP server "t" is not available' in gone.output
