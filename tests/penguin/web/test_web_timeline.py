"""The trace view's timeline and the usage charts for keyboards and phones (issue 35 items 8/9).

Each bar of the timeline is a button with a name (its kind, record, status and latency): Tab
reaches it and Enter shows the exact request at its record, as a click does.  Charts are drawn
at their box's width, so their text keeps its size at 390 px (a 900-unit drawing shrunk to a
phone had text 4 px tall).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from webkit import TOKEN, Server, penguin_serve, shot, watch

SCRIPT = {
    "responses": [
        [{"text": "Looking."}, {"tool_call": {"name": "echo", "arguments": {}, "id": "e1"}}],
        [{"text": "Done."}],
    ],
    "tools": [{"name": "echo", "description": "echo", "parameters": {"type": "object"}}],
}
WIDTHS = {"desktop": {"width": 1280, "height": 900}, "mobile": {"width": 390, "height": 844}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with penguin_serve(tmp_path_factory.mktemp("web-timeline"), SCRIPT, approve="allow-all") as s:
        yield s


@pytest.fixture(scope="module")
def session(server: Server) -> str:
    sid: str = server.api("POST", "/api/sessions", {"approval": "allow-all"})["id"]
    with server.client() as c, c.stream("GET", "/api/events") as events:
        server.api(
            "POST", f"/api/sessions/{sid}/tasks", {"input": [{"type": "text", "text": "go"}]}
        )
        for line in events.iter_lines():  # until the session is idle again
            if '"session_state"' in line and f'"{sid}"' in line and '"idle"' in line:
                break
    return sid


def _page(browser: Any, server: Server, size: str) -> Any:
    mobile = size == "mobile"
    context = browser.new_context(
        viewport=WIDTHS[size],
        device_scale_factor=3 if mobile else 1,
        is_mobile=mobile,
        has_touch=mobile,
    )
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(f"{server.base}/#token={TOKEN}")
    page.wait_for_selector("table.sessions")
    return page


def test_timeline_bars_are_buttons_tab_reaches_and_enter_picks(
    browser: Any, server: Server, session: str
) -> None:
    page = _page(browser, server, "desktop")
    try:
        watched = watch(page)
        page.goto(f"{server.base}/#/s/{session}/trace")
        page.wait_for_selector(".timeline-svg rect.span.request")
        bars = page.locator(".timeline-svg [role=button]")
        names = bars.evaluate_all("(els) => els.map((el) => el.getAttribute('aria-label'))")
        assert len(names) == 3  # two requests and the tool call
        assert names[0].startswith("request at 1:") and "completed" in names[0]
        assert any(n.startswith("tool call echo at 1:") for n in names)
        # The file buttons come just before the timeline: one Tab from the last of them.
        page.locator(".files button.file").last.focus()
        page.keyboard.press("Tab")
        focused = page.evaluate("() => document.activeElement.getAttribute('aria-label')")
        assert focused == names[0]
        stroke = page.evaluate("() => getComputedStyle(document.activeElement).strokeWidth")
        assert stroke == "3px"  # the focus shows
        at = names[0].split(" ")[2].rstrip(",")
        page.keyboard.press("Enter")
        page.wait_for_selector(f".detail .context h3 >> text=At {at}")
        assert page.locator(f"li.record.active[data-at='{at}']").count() == 1
        page.keyboard.press("Tab")
        page.keyboard.press(" ")  # Space too, on the next bar
        second = names[1].split(" ")[2].rstrip(",")
        page.wait_for_selector(f".detail .context h3 >> text=At {second}")
        watched.check()
    finally:
        page.context.close()


def test_chart_text_keeps_its_size_on_a_phone(browser: Any, server: Server, session: str) -> None:
    page = _page(browser, server, "mobile")
    try:
        watched = watch(page)
        page.goto(f"{server.base}/#/s/{session}/trace")
        page.wait_for_selector(".timeline-svg .tick")
        heights = page.locator(".timeline-svg .tick, .timeline-svg .lane-label").evaluate_all(
            "(els) => els.map((el) => el.getBoundingClientRect().height)"
        )
        assert heights and min(heights) >= 10, heights
        shot(page, "web-timeline-mobile", full_page=False)
        page.goto(f"{server.base}/#/usage")
        page.wait_for_selector(".chart svg .tick")
        heights = page.locator(".chart svg .tick").evaluate_all(
            "(els) => els.map((el) => el.getBoundingClientRect().height)"
        )
        assert heights and min(heights) >= 10, heights
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390
        watched.check()
    finally:
        page.context.close()
