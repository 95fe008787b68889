"""A reload in the middle of a streamed text segment shows the same text (R-WEB-2, R-SRV-6):
the page rebuilds the half-streamed segment from the live fragments, resumes the stream after
them, and shows the rest once — nothing lost, nothing twice.

The scripted model cannot pause inside a segment, so this test hosts the app in process (a
real uvicorn on 127.0.0.1) with a model that streams half a segment and waits for the test;
Chromium is driven with Playwright's async API in the same event loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from serverkit import TOKEN, served
from webkit import CHROMIUM, SCREENSHOTS, require_chromium

from engine import LLMOutcome, LLMRequest
from eventstore import OmniMessage
from eventstore import builders as b


class _Gated:
    """Streams "Hello, wor", waits for the gate, then finishes the segment."""

    vision = True

    def __init__(self, gate: anyio.Event) -> None:
        self.gate = gate

    async def stream(self, request: LLMRequest) -> AsyncIterator[OmniMessage | LLMOutcome]:
        yield b.partial_text("start")
        yield b.partial_text("delta", "Hello, ")
        yield b.partial_text("delta", "wor")
        await self.gate.wait()
        yield b.partial_text("delta", "ld")
        yield b.partial_text("stop")
        yield b.assistant_text("Hello, world")
        yield LLMOutcome("completed")


@pytest.mark.anyio
async def test_r_web_2_reload_mid_segment_shows_the_same_text(tmp_path: Path) -> None:
    require_chromium()
    from playwright.async_api import async_playwright

    gate = anyio.Event()
    async with (
        served(tmp_path, llm_factory=lambda m: _Gated(gate), approval="allow-all") as s,
        async_playwright() as p,
    ):
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await browser.new_page()
            page.set_default_timeout(20_000)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(f"{s.base}/#token={TOKEN}")
            await page.wait_for_selector("table.sessions")
            sid = await s.new_session()
            await page.goto(f"{s.base}/#/s/{sid}")
            await page.fill(".composer textarea", "Say hello")
            await page.click("button.send")
            await page.wait_for_selector(".b-assistant.streaming >> text=Hello, wor")

            await page.reload()
            streaming = page.locator(".b-assistant.streaming .body")
            await streaming.wait_for()
            assert await streaming.inner_text() == "Hello, wor"
            gate.set()
            await page.wait_for_selector(".b-assistant:not(.streaming) >> text=Hello, world")
            await page.wait_for_selector(".tag.state[data-state=idle]")
            texts = await page.locator(".b-assistant .body").all_inner_texts()
            assert texts == ["Hello, world"]  # the rest shown once, the fragment replaced
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(SCREENSHOTS / "web-reload-mid-stream.png"))
            assert errors == []
        finally:
            await browser.close()
