"""The engine's MCP client under the official conformance suite (@modelcontextprotocol/conformance).

The suite runs ``python conformance_client.py <server url>`` with the scenario's name in
``MCP_CONFORMANCE_SCENARIO``.  The client is ``engine.McpEnvironment`` exactly as a session uses
it (connect, list the tools, call one through the Environment protocol); exit 0 when the
scenario's call succeeded, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import anyio

from engine import AbortSignal, McpEnvironment, McpServer
from eventstore import ToolCallOutputPayload
from eventstore import builders as b

# scenario -> (tool to call, its arguments); None: connecting and listing is the scenario.
CALLS: dict[str, tuple[str, dict[str, object]] | None] = {
    "initialize": None,
    "tools_call": ("add_numbers", {"a": 5, "b": 3}),
    "sse-retry": ("test_reconnection", {}),
}


async def main(url: str, scenario: str) -> int:
    if scenario not in CALLS:
        print(f"unknown scenario {scenario!r}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as workspace:
        async with McpEnvironment(
            {"s": McpServer(url=url, timeout_ms=20000)}, workspace=workspace
        ) as env:
            tools = await env.list_tools()
            print("tools:", [t.name for t in tools], "errors:", env.errors)
            if env.errors:
                return 1
            planned = CALLS[scenario]
            if planned is None:
                return 0
            name, arguments = planned
            call = b.tool_call(f"s__{name}", json.dumps(arguments), "conformance-1")
            out = [m async for m in env.execute(call, signal=AbortSignal())][-1]
            payload = out.payload
            assert isinstance(payload, ToolCallOutputPayload)
            print("output:", payload.stop_reason, payload.output)
            return 0 if payload.stop_reason == "completed" else 1


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[-1], os.environ.get("MCP_CONFORMANCE_SCENARIO", "")))
