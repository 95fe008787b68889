"""Fixtures for the MCP tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mcpkit import HttpServer, start_http_server


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    """One HTTP MCP server for the module, requiring ``X-Api-Key``."""
    yield from start_http_server(tmp_path_factory)
