"""Shared test configuration: anyio's pytest plugin on the asyncio backend; library reports."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def reported(caplog: pytest.LogCaptureFixture) -> Callable[[], str]:
    """What the libraries reported through ``logging`` since the last call, one line per
    record (the text the CLI prints to stderr)."""
    caplog.set_level(logging.WARNING)

    def take() -> str:
        text = "".join(f"{message}\n" for message in caplog.messages)
        caplog.clear()
        return text

    return take
