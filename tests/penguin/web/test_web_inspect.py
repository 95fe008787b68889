"""The Web App's inspection pages and its safety in a real Chromium against a real
``penguin serve`` (R-WEB-2/4/5/6): a hostile trace renders inert (conversation, trace view
and the exact request), a failed ``auth`` request locks the composer until dismissed, a
5,000-message session opens with only its newest messages built and grows as it is scrolled."""

from __future__ import annotations

import base64
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
    page.reload()  # still locked: the history ends with the auth failure
    page.wait_for_selector(".auth-failure >> text=invalid API key")
    assert page.locator("button.send").is_disabled()
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


PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
CHILD = "session-2026-11-29-11-00-01-c4i1d000"
ATTACHED = "\n\n[attached image: /home/u/.penguin/scratchpad/upload-0000beef.png]"


def _crafted_trace(sid: str) -> str:
    """Two parallel tool calls (one starting a subagent) answered out of order, a failed attempt
    and its retry (whose end lacks its attempt number: a validator warning)."""

    def rec(ms: int, kind: str, payload: dict[str, Any]) -> str:
        ts = f"2026-11-29T11:00:00.{ms:03d}Z"
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

    def call(i: str) -> dict[str, Any]:
        args = json.dumps({"cmd": f"job {i}"})
        return {
            "type": "tool_call",
            "role": "assistant",
            "name": "exec_command",
            "arguments": args,
            "tool_call_id": f"call_{i}",
            "stop_reason": "completed",
        }

    def output(i: str) -> dict[str, Any]:
        return {
            "type": "tool_call_output",
            "role": "user",
            "output": f"out {i}",
            "tool_call_id": f"call_{i}",
            "stop_reason": "completed",
        }

    def allow(i: str) -> dict[str, Any]:
        return {"type": "approval_decision", "decision": "allow", "tool_call_id": f"call_{i}"}

    records = [
        rec(0, "session_meta", meta),
        rec(1, "model_msg", {"type": "text", "role": "user", "text": "run both" + ATTACHED}),
        rec(2, "event_msg", {"type": "request_begin"}),
        rec(3, "model_msg", call("a")),
        rec(3, "event_msg", allow("a")),
        rec(4, "model_msg", call("b")),
        rec(4, "event_msg", allow("b")),
        rec(6, "event_msg", {"type": "subagent", "session_id": CHILD}),
        rec(5, "event_msg", {"type": "request_end", "status": "completed"}),
        rec(50, "model_msg", output("b")),
        rec(90, "model_msg", output("a")),
        rec(91, "event_msg", {"type": "request_begin"}),
        rec(
            95,
            "event_msg",
            {
                "type": "request_end",
                "status": "timeout",
                "error_message": "idle timeout",
                "attempt": 1,
                "retry_in_ms": 250,
            },
        ),
        rec(345, "event_msg", {"type": "request_begin"}),
        rec(
            350,
            "model_msg",
            {"type": "text", "role": "assistant", "text": "Both done.", "stop_reason": "completed"},
        ),
        # No `attempt` on the retry's end: a validator warning (V-12) the trace view lists.
        rec(351, "event_msg", {"type": "request_end", "status": "completed"}),
    ]
    return "\n".join(records) + "\n"


def test_r_web_2_parallel_calls_tagged_and_retries_marked(page: Any, server: Server) -> None:
    sid = "session-2026-11-29-11-00-00-pa11e1aa"
    server.api("POST", "/api/traces/import", {"jsonl": _crafted_trace(sid)})
    pad = server.home / "default_project" / "agents" / "default_agent" / "scratchpad" / sid
    pad.mkdir(parents=True)
    (pad / "upload-0000beef.png").write_bytes(base64.b64decode(PNG_1PX))
    page.goto(f"{server.base}/#/s/{sid}")
    page.wait_for_selector(".b-assistant >> text=Both done.")
    assert page.locator(".tool .tag.parallel").all_inner_texts() == ["parallel 1/2", "parallel 2/2"]
    # The subagent a call started nests under it, linked to the child session.
    nested = page.locator(".tool .nested a")
    assert nested.count() == 1 and nested.get_attribute("href") == f"#/s/{CHILD}"
    outputs = page.locator(".tool .output").all_inner_texts()
    assert outputs == ["out a", "out b"]  # each output under its own call
    retry = page.locator(".notice.retry").inner_text()
    assert retry == "[retry] attempt 1 failed (timeout: idle timeout), next in 250 ms"
    assert page.locator(".retry-wait").is_hidden()  # history: no live countdown
    # The attached image comes from the session's scratchpad, not as a path in the text.
    assert page.locator(".b-user .plain").inner_text() == "run both"
    page.wait_for_function("() => document.querySelector('.b-user img.shot').naturalWidth === 1")
    page.click("text=Trace view")
    page.wait_for_selector(".timeline-svg")
    assert page.locator(".timeline-svg rect.call").count() == 2
    assert page.locator(".timeline-svg rect.span.request").count() == 3
    finding = page.locator(".findings li.finding").inner_text()
    assert finding.startswith("line 16: V-12 warning: attempt missing"), finding
    shot(page, "web-parallel-trace")
