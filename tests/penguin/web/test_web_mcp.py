"""The Web App's new-session form sends MCP servers (SPEC §26): bad JSON is caught in the page,
a URL server starts a session (the server's refusals: tests/mcp/test_mcp_server_body.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from webkit import Server, penguin_serve

SCRIPT = {"responses": [[{"text": "ok"}]]}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with penguin_serve(tmp_path_factory.mktemp("web-mcp"), SCRIPT) as s:
        yield s


def test_r_mcp_1_the_form_sends_the_sessions_mcp_servers(page: Any, server: Server) -> None:
    page.fill("textarea[name=mcp]", "{not json")
    page.click("text=Create session")
    page.wait_for_selector("p.error >> text=MCP servers: not valid JSON")
    page.fill("textarea[name=mcp]", '{"docs": {"url": "http://127.0.0.1:9/mcp"}}')
    page.click("text=Create session")
    page.wait_for_url("**/#/s/*")
