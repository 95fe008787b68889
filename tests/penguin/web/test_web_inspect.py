"""The Web App's inspection pages and its safety in a real Chromium against a real
``penguin serve`` (R-WEB-2/4/5/6): a hostile trace renders inert (conversation, trace view
and the exact request), a failed ``auth`` request locks the composer until dismissed, a
5,000-message session opens with only its newest messages built and grows as it is scrolled."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from webkit import Server, penguin_serve, shot

# Every way a string could try to become markup or script, in text, arguments and output.
HOSTILE = (
    "<script>window.__pwned = 'script'</script> "
    '<img src="x" onerror="window.__pwned = \'img\'"> '
    "[click me](javascript:window.__pwned='link') "
    "<a href=\"javascript:window.__pwned='a'\">a</a> "
    "\x1b[31mred\x1b[0m \x1b]8;;http://evil.example\x07osc\x1b]8;;\x07 "
    "<iframe src=\"javascript:window.__pwned='frame'\"></iframe>"
)
TOOLS = [
    {
        "name": "exec_command",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    }
]
SCRIPT = {
    "tools": TOOLS,
    "responses": [
        [
            {"thinking": HOSTILE},
            {"text": "# Title " + HOSTILE + "\n\n```\n" + HOSTILE + "\n```"},
            {
                "tool_call": {
                    "name": "exec_command",
                    "arguments": {"cmd": HOSTILE},
                    "result": {"output": HOSTILE},
                }
            },
        ],
        [{"text": "Done " + HOSTILE}],
        [{"fail": {"status": "auth", "message": "invalid API key"}}],
    ],
}
INERT = """() => {
  const bad = document.querySelectorAll(
    "main script, main iframe, main img, main [onerror], main [onclick], a[href^='javascript' i]");
  return {pwned: window.__pwned ?? null, bad: bad.length};
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with penguin_serve(tmp_path_factory.mktemp("web-inspect"), SCRIPT, approve="allow-all") as s:
        yield s


def _ran_one_task(page: Any, server: Server) -> str:
    sid: str = server.api("POST", "/api/sessions", {})["id"]
    page.goto(f"{server.base}/#/s/{sid}")
    page.fill(".composer textarea", "Hello")
    page.click("button.send")
    page.wait_for_selector(".b-assistant >> text=Done")
    page.wait_for_selector(".tag.state[data-state=idle]")
    return sid


def test_r_web_5_hostile_trace_renders_inert(page: Any, server: Server) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    sid = _ran_one_task(page, server)
    assert page.evaluate(INERT) == {"pwned": None, "bad": 0}
    body = page.locator("main").inner_text()
    assert "<script>window.__pwned = 'script'</script>" in body  # shown as text
    assert '<img src="x" onerror=' in body
    assert "\\x1b[31mred" in body  # escape sequences are visible, not interpreted
    assert page.locator(".tool .output").inner_text().startswith("<script>")
    page.click(".b-thinking summary")
    shot(page, "web-hostile")

    # The trace view and the exact request show the same content, still inert.
    page.goto(f"{server.base}/#/s/{sid}/trace")
    page.wait_for_selector(".records li.record")
    page.locator(".records li.record:has-text('request_begin') button.at").last.click()
    page.wait_for_selector(".context .request-title")
    assert page.evaluate(INERT) == {"pwned": None, "bad": 0}
    assert "<script>" in page.locator(".detail").inner_text()
    page.reload()  # the record list rendered from a fresh load is inert too
    page.wait_for_selector(".records li.record")
    assert page.evaluate(INERT) == {"pwned": None, "bad": 0}
    assert dialogs == []


def test_r_web_3_auth_failure_locks_the_composer_until_dismissed(page: Any, server: Server) -> None:
    _ran_one_task(page, server)
    page.fill(".composer textarea", "Once more")
    page.click("button.send")
    page.wait_for_selector(".auth-failure >> text=invalid API key")
    page.wait_for_selector(".tag.state[data-state=idle]")
    assert page.locator("button.send").is_disabled()
    assert page.locator(".composer textarea").is_disabled()
    shot(page, "web-auth-failure")
    page.click(".auth-failure button.dismiss")
    assert page.locator(".auth-failure").is_hidden()
    assert page.locator("button.send").is_enabled()


def _long_trace(sid: str, turns: int) -> str:
    """A valid trace of ``turns`` user/assistant exchanges (2 model messages each)."""

    def rec(t: int, kind: str, payload: dict[str, Any]) -> str:
        ts = f"2026-11-29T10:{t // 60000 % 60:02d}:{t // 1000 % 60:02d}.{t % 1000:03d}Z"
        return json.dumps({"timestamp": ts, "type": kind, "payload": payload})

    meta = {
        "session_id": sid,
        "provider": "scripted",
        "model_id": "script",
        "model_context_window": 200000,
        "system_prompt": "",
        "agent_state": "/agent/state",
        "workspace": "/workspace",
    }
    lines = [rec(0, "session_meta", meta)]
    for i in range(turns):
        t = i * 10
        lines.append(
            rec(t + 1, "model_msg", {"type": "text", "role": "user", "text": f"question {i}"})
        )
        lines.append(rec(t + 2, "event_msg", {"type": "request_begin"}))
        answer = {
            "type": "text",
            "role": "assistant",
            "text": f"answer {i}",
            "stop_reason": "completed",
        }
        lines.append(rec(t + 3, "model_msg", answer))
        lines.append(rec(t + 4, "event_msg", {"type": "request_end", "status": "completed"}))
    return "\n".join(lines) + "\n"


def test_r_web_2_five_thousand_messages_open_incrementally(page: Any, server: Server) -> None:
    sid = "session-2026-11-29-10-00-00-5000aaaa"
    server.api("POST", "/api/traces/import", {"jsonl": _long_trace(sid, 2500)})
    page.goto(f"{server.base}/#/s/{sid}")
    page.wait_for_selector(".b-assistant >> text=answer 2499")
    built = page.locator(".transcript .block").count()
    assert 0 < built <= 200  # only the newest messages are in the DOM
    assert "not shown" in page.locator(".transcript .more").inner_text()
    # Scrolling to the top builds the next page of earlier messages, and keeps the place.
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_function(
        "(n) => document.querySelectorAll('.transcript .block').length > n", arg=built
    )
    page.locator(".transcript .more").scroll_into_view_if_needed()
    shot(page, "web-long-session", full_page=False)
