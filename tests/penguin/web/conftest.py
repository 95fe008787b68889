"""Web App browser tests (R-WEB-6): one Chromium per test module, a fresh page per test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from webkit import CHROMIUM, Server, require_chromium, watch


@pytest.fixture(scope="module")
def browser(server: Server) -> Iterator[Any]:
    """Closed before the module's server stops, so no connection holds its shutdown up."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any, server: Server) -> Iterator[Any]:
    """A fresh logged-in page (its own context) on the module's ``server``; browser errors
    (a CSP violation is one) fail the test; the context is closed so its streams end."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    try:
        page = context.new_page()
        page.set_default_timeout(20_000)
        watched = watch(page)
        page.goto(server.login_url)
        page.wait_for_selector("table.sessions")
        yield page
        watched.check()
    finally:
        context.close()
