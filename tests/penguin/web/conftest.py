"""Web App browser tests (R-WEB-6): one Chromium per test module, a fresh page per test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from webkit import CHROMIUM, require_chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()
