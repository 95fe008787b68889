"""The Web App's run controls in a real Chromium against a real ``penguin serve`` (R-WEB-3/6):
a retry countdown cut short with "Retry now", a reload in the middle of a running task, Stop,
and "Give up" on a countdown."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from webkit import Server, penguin_serve, shot

SCRIPT = {
    "responses": [
        # retry_after_s stretches the backoff to 30 s: only the button ends it this soon.
        [
            {"text": "Warming up"},
            {"fail": {"status": "failed", "message": "overloaded", "retry_after_s": 30}},
        ],
        [{"text": ["Recovered ", "after the retry."]}, {"sleep_ms": 600_000}],
    ]
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with penguin_serve(tmp_path_factory.mktemp("web-controls"), SCRIPT) as s:
        yield s


def _start(page: Any, server: Server) -> None:
    row = server.api("POST", "/api/sessions", {})
    page.goto(f"{server.base}/#/s/{row['id']}")
    page.fill(".composer textarea", "Go")
    page.click("button.send")
    page.wait_for_selector(".retry-wait >> text=Retrying in")


def test_r_web_3_retry_now_reload_mid_task_and_stop(page: Any, server: Server) -> None:
    _start(page, server)
    assert "overloaded" in page.locator(".notice.retry").inner_text()
    shot(page, "web-retry-countdown")
    with page.expect_response(lambda r: r.url.endswith("/retry-now")) as answer:
        page.click("button.retry-now")
    assert answer.value.json() == {"skipped": True}  # the button cut the wait short
    page.wait_for_selector(".b-assistant >> text=Recovered after the retry.")
    assert page.locator(".retry-wait").is_hidden()

    # Reload while the task is still running: the same text, still running, Stop still there.
    page.reload()
    page.wait_for_selector(".b-assistant >> text=Recovered after the retry.")
    assert page.locator(".tag.state").inner_text() == "running"
    page.click("button.stop")
    page.wait_for_selector(".notice.abort")
    page.wait_for_selector(".tag.state[data-state=idle]")
    assert page.locator("button.stop").is_hidden()
    shot(page, "web-stopped")


def test_r_web_3_give_up_on_a_countdown_after_a_reload(page: Any, server: Server) -> None:
    _start(page, server)
    page.reload()  # the countdown survives a reload (its end is the recorded time + wait)
    page.wait_for_selector(".retry-wait >> text=Retrying in")
    page.click("button.give-up")
    page.wait_for_selector(".notice.abort >> text=backoff")
    page.wait_for_selector(".tag.state[data-state=idle]")
    assert page.locator(".retry-wait").is_hidden()


def test_r_srv_6_a_task_started_before_the_stream_opens_is_not_lost(
    page: Any, server: Server
) -> None:
    """The page loads an empty, idle history, and the task starts (here: from another client)
    and reaches its backoff before the page opens its stream.  The stream must carry what was
    published since the history was read: the countdown shows.  (Found under load: a click on
    Send before the history arrived left the page without the retry wait.)"""
    row = server.api("POST", "/api/sessions", {})
    sid = row["id"]

    def history_then_task(route: Any) -> None:
        empty = route.fetch()  # the history as it was: idle, no message
        server.api(
            "POST", f"/api/sessions/{sid}/tasks", {"input": [{"type": "text", "text": "Go"}]}
        )
        # Wait on a stream of our own (from the session's start) until the retry wait is
        # recorded, then let the page go on.
        stream = f"/api/sessions/{sid}/stream?last_event_id=0:0"
        with server.client() as c, c.stream("GET", stream) as events:
            for line in events.iter_lines():
                if line.startswith("data: ") and '"retry_in_ms":' in line and "request_end" in line:
                    break
        route.fulfill(response=empty)

    page.route(f"**/api/sessions/{sid}/messages", history_then_task)
    page.goto(f"{server.base}/#/s/{sid}")
    page.wait_for_selector(".retry-wait >> text=Retrying in")
    assert "overloaded" in page.locator(".notice.retry").inner_text()
    page.click("button.give-up")
    page.wait_for_selector(".tag.state[data-state=idle]")
