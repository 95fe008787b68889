"""Shared test configuration: anyio's pytest plugin on the asyncio backend; library reports."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest
from secretkit import SUITE_SECRETS, traces_holding
from sharedkit import check_shared, in_ci


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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "needs_shared(path): the test reads ../shared; skipped without it, failed in CI"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("needs_shared"):
        check_shared(mark.args[0], ci=in_ci())


@pytest.fixture(scope="session", autouse=True)
def _no_secret_in_any_trace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """R-SET-4: after the run, no trace any test wrote holds a key or token the suite used."""
    yield
    leaked = traces_holding(tmp_path_factory.getbasetemp(), SUITE_SECRETS)
    assert leaked == [], f"R-SET-4: secrets recorded in traces: {leaked[:5]}"
