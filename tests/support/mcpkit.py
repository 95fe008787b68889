"""Helpers for the MCP tests (importable as `mcpkit`): a real MCP server (the SDK's MCPServer,
tests/mcp/mcp_test_server.py) over stdio and HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SERVER = Path(__file__).parents[1] / "mcp" / "mcp_test_server.py"
# The server imports the whole SDK: on a loaded 2-core machine its start takes seconds.
CONNECT_MS = 120_000


def stdio_command() -> list[str]:
    return [sys.executable, str(SERVER), "stdio"]


@dataclass
class HttpServer:
    url: str
    key: str
    evidence: Path
    process: subprocess.Popen[bytes]


def start_http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    """One HTTP MCP server for the module, requiring ``X-Api-Key``."""
    base = tmp_path_factory.mktemp("mcp-http")
    port_file = base / "port"
    key = "key-" + os.urandom(8).hex()
    env = {**os.environ, "MCP_TEST_KEY": key, "MCP_TEST_DIR": str(base)}
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port_file)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        give_up = time.monotonic() + CONNECT_MS / 1000
        # Waits for the server's own announcement (the port file appears once it listens).
        while not port_file.exists():
            if proc.poll() is not None:
                raise RuntimeError(f"the MCP test server exited with {proc.returncode}")
            if time.monotonic() > give_up:
                raise RuntimeError("the MCP test server did not start")
            time.sleep(0.05)
        port = int(port_file.read_text())
        yield HttpServer(f"http://127.0.0.1:{port}/mcp", key, base, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
