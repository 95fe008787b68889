"""A real MCP server for the tests (the SDK's MCPServer, formerly FastMCP).

Run as ``python mcp_test_server.py stdio`` or ``python mcp_test_server.py http PORTFILE``
(HTTP on 127.0.0.1, a free port written to PORTFILE once listening).  ``MCP_TEST_KEY`` in the
environment makes the HTTP server require the header ``X-Api-Key: <key>``; ``MCP_TEST_DIR`` is
where the tools leave evidence (a cancelled call, a pid).
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import (
    CallToolResult,
    EmbeddedResource,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)

# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

server = MCPServer("penguin-test")
EVIDENCE = Path(os.environ.get("MCP_TEST_DIR", "."))


@server.tool(description="Echo the text back.")
def echo(text: str) -> str:
    return f"echo: {text}"


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> dict[str, int]:
    return {"sum": a + b}


@server.tool(description="A picture and a caption.")
def picture() -> list[Any]:
    return [
        TextContent(type="text", text="a red dot"),
        Image(data=PNG, format="png").to_image_content(),
    ]


@server.tool(description="Structured content only.")
def measure() -> CallToolResult:
    return CallToolResult(content=[], structured_content={"width": 3, "unit": "cm"})


@server.tool(description="An embedded text resource.")
def document() -> list[Any]:
    return [
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="file:///notes.txt", mime_type="text/plain", text="line 1"
            ),
        )
    ]


@server.tool(description="Always fails.")
def broken(reason: str) -> str:
    raise ToolError(f"broken on purpose: {reason}")


@server.tool(
    description="Sleeps; leaves 'started', and 'cancelled' when cancelled, in MCP_TEST_DIR."
)
async def slow(seconds: float) -> str:
    (EVIDENCE / "started").write_text("started")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        (EVIDENCE / "cancelled").write_text("cancelled")
        raise
    return "slept"


@server.tool(description="The server's process id.")
def pid() -> str:
    (EVIDENCE / "pids").open("a").write(f"{os.getpid()}\n")
    return str(os.getpid())


@server.tool(description="Dies in the middle of the call.")
async def die() -> str:
    (EVIDENCE / "died").write_text(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGKILL)
    await anyio.sleep(60)
    return "unreachable"


@server.tool(description="Whether an environment variable is set (never its value).")
def has_env(name: str) -> str:
    return "set" if os.environ.get(name) else "unset"


@server.tool(
    description="Reads nothing, changes nothing.", annotations=ToolAnnotations(read_only_hint=True)
)
def look() -> str:
    return "looked"


async def serve_http(port_file: Path) -> None:
    import uvicorn
    from starlette.responses import PlainTextResponse
    from starlette.types import ASGIApp, Receive, Scope, Send

    app: ASGIApp = server.streamable_http_app()
    key = os.environ.get("MCP_TEST_KEY")
    inner = app

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and key is not None:
            headers = dict(scope.get("headers") or [])
            if headers.get(b"x-api-key", b"").decode() != key:
                await PlainTextResponse("missing key", status_code=401)(scope, receive, send)
                return
        await inner(scope, receive, send)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(guarded, log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)
    port = sock.getsockname()[1]

    async def announce() -> None:
        while not uv.started:
            await anyio.sleep(0.01)
        tmp = port_file.with_suffix(".tmp")
        tmp.write_text(str(port))
        tmp.rename(port_file)

    async with anyio.create_task_group() as tg:
        tg.start_soon(announce)
        await uv.serve(sockets=[sock])


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        anyio.run(serve_http, Path(sys.argv[2]))
