"""The Web App safe by construction (issue 29, R-WEB-5): bidi and control characters from models,
tools and traces are shown as visible escapes, by the CLI's own table, everywhere; the login
never puts the token in a cookie and what another port's app receives is useless."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from webkit import TOKEN, Server, penguin_serve, shot

from penguin.cli.terminal.safe import safe
from penguin.web import STATIC_DIR

TOOLS = [
    {
        "name": "exec_command",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    }
]
FILE = "invoice\u202etxt.sh"  # shows as "invoice" + "hs.txt" reversed when not neutralized
SCRIPT = {
    "tools": TOOLS,
    "responses": [
        [
            {"thinking": "Plan: run \u2066it\u2069 \x1b[31mnow"},
            {"text": "I will run \u202e" + "dlrow\u202c and ring \x07 the bell."},
            {
                "tool_call": {
                    "name": "exec_command",
                    "arguments": {"cmd": f"sh {FILE}"},
                    "result": {"output": "ran \u200finvoice\x9b2J\r\n"},
                }
            },
        ],
        [{"text": "Done \u061c\u200e."}],
    ],
}
# Every character the table escapes (bar lone surrogates, which a page cannot receive as text).
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with penguin_serve(tmp_path_factory.mktemp("web-safety"), SCRIPT, approve="ask") as s:
        yield s


def _shown(page: Any) -> str:
    text: str = page.evaluate("() => document.body.innerText")
    attrs: str = page.evaluate(
        "() => [...document.querySelectorAll('*')].flatMap(e => [...e.attributes])"
        ".filter(a => !['data-id', 'href', 'src'].includes(a.name)).map(a => a.value).join(' ')"
    )
    return text + "\n" + attrs


def test_r_web_5_the_approval_card_shows_what_will_run(page: Any, server: Server) -> None:
    """An approval card for ``invoice\\u202etxt.sh`` shows exactly that, never a reordered name;
    the thinking, the reply, the output and the trace view neither carry a raw control or bidi
    character."""
    sid = server.api("POST", "/api/sessions", {"approval": "ask"})["id"]
    page.goto(f"{server.base}/#/s/{sid}")
    page.fill(".composer textarea", "Go")
    page.click("button.send")
    tool = page.locator(".tool").first
    tool.locator("button.approve").wait_for()
    assert "sh invoice\\u202etxt.sh" in tool.inner_text()
    shown = _shown(page)
    assert not UNSAFE.search(shown), repr(UNSAFE.search(shown))
    shot(page, "web-bidi-approval")
    tool.locator("button.approve").click()
    page.wait_for_selector(".b-assistant >> text=Done")
    page.locator(".b-thinking summary").first.click()
    shown = _shown(page)
    for expected in ("\\u2066it\\u2069", "\\x1b[31m", "\\u202edlrow\\u202c", "\\x07", "\\x9b2J"):
        assert expected in shown, expected
    assert not UNSAFE.search(shown), repr(UNSAFE.search(shown))
    page.goto(f"{server.base}/#/s/{sid}/trace")
    page.wait_for_selector(".record button.at")
    page.locator(".record button.at").last.click()
    page.wait_for_selector(".context .record-json")
    shown = _shown(page)
    assert "\\u202e" in shown and not UNSAFE.search(shown), repr(UNSAFE.search(shown))
    page.goto(f"{server.base}/#/")
    page.wait_for_selector(f"table.sessions tr[data-id='{sid}']")
    assert not UNSAFE.search(_shown(page))


def test_r_web_5_the_page_and_the_cli_escape_by_one_table(page: Any, server: Server) -> None:
    """``visible()`` in dom.js mirrors ``penguin.cli.terminal.safe.safe``: the same characters, the same
    escapes, for every code point of the BMP (lone surrogates included) and beyond."""
    js: list[list[Any]] = page.evaluate(
        """async () => {
          const { visible } = await import('/js/dom.js');
          const out = [];
          for (let i = 0; i <= 0xffff; i++) {
            const c = String.fromCharCode(i), v = visible(c);
            if (v !== c) out.push([i, v]);
          }
          for (const cp of [0x1f600, 0xe0001, 0x10ffff]) {
            const c = String.fromCodePoint(cp);
            if (visible(c) !== c) out.push([cp, visible(c)]);
          }
          return out;
        }"""
    )
    py = []
    for i in [*range(0x10000), 0x1F600, 0xE0001, 0x10FFFF]:
        c = chr(i)
        if safe(c) != c:
            py.append([i, safe(c)])
    assert js == py
    assert len(py) > 2048  # the table is not empty: C0/C1 controls, bidi, surrogates


def test_r_web_5_login_keeps_the_token_out_of_cookies(page: Any, server: Server) -> None:
    cookies = page.context.cookies()
    assert [c["name"] for c in cookies] == [f"penguin_session_{server.base.rsplit(':', 1)[1]}"]
    (cookie,) = cookies
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert TOKEN not in cookie["value"]
    assert page.evaluate("() => localStorage.getItem('penguin.key')")
    # Log out: the server ends the login; the page asks for the login URL again.
    page.click("#logout")
    page.wait_for_selector(".card.login")
    assert page.evaluate("() => localStorage.getItem('penguin.key')") is None


# A string reaches the page as text only through dom.js (``h``/``setText``/``visible``).
SINKS = re.compile(r"\.textContent\s*=|\.nodeValue\s*=|\.data\s*[+]?=|appendData\((?!visible\()")


def test_r_web_5_every_shown_string_goes_through_visible() -> None:
    sources = sorted(p for p in Path(STATIC_DIR / "js").glob("*.js") if p.name != "dom.js")
    assert sources
    for path in sources:
        text = path.read_text(encoding="utf-8")
        assert not SINKS.search(text), f"{path.name}: {SINKS.search(text)}"
        assert "new EventSource" not in text, path.name  # it cannot send the login's key


def _long_trace(sid: str, turns: int) -> str:
    """A valid trace of ``1 + 4 * turns`` records."""

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
        user = {"type": "text", "role": "user", "text": f"question {i}"}
        answer = {"type": "text", "role": "assistant", "text": f"a{i}", "stop_reason": "completed"}
        lines.append(rec(t + 1, "model_msg", user))
        lines.append(rec(t + 2, "event_msg", {"type": "request_begin"}))
        lines.append(rec(t + 3, "model_msg", answer))
        lines.append(rec(t + 4, "event_msg", {"type": "request_end", "status": "completed"}))
    return "\n".join(lines) + "\n"


def test_r_web_4_the_trace_view_pages_beyond_2000_records(page: Any, server: Server) -> None:
    """Issue 29: the trace view stopped at 2,000 records; the rest now load on demand."""
    sid = "session-2026-11-29-10-00-00-2100aaaa"
    server.api("POST", "/api/traces/import", {"jsonl": _long_trace(sid, 600)})  # 2,401 records
    page.goto(f"{server.base}/#/s/{sid}/trace")
    page.wait_for_selector(".record button.at >> text=1:1999")
    assert page.locator(".record").count() == 2000
    assert "401 more records" in page.locator(".records .more").inner_text()
    page.click(".records button.load-more")
    page.wait_for_selector(".record button.at >> text=1:2400")
    assert page.locator(".record").count() == 2401
    assert page.locator(".records .more").count() == 0
    page.locator(".record button.at >> text=1:2399").click()  # beyond the first page
    page.wait_for_selector(".context >> text=At 1:2399")


class _Third:
    """Another web app on 127.0.0.1, on a third port: it records the headers browsers send."""

    def __init__(self) -> None:
        import http.server

        seen: list[dict[str, str]] = []
        self.seen = seen

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(dict(self.headers.items()))
                self.send_response(200)
                self.send_header("content-type", "text/plain")
                self.end_headers()
                self.wfile.write(b"another app")

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_r_srv_1_in_a_browser_another_ports_app_gets_nothing_usable(
    browser: Any, server: Server, tmp_path: Path
) -> None:
    """Issue 29 acceptance in Chromium: logged in to two servers on two ports, the browser
    visits a third app on a third port; that app receives both login cookies and can
    authenticate to neither server with them; both Web Apps stay logged in."""
    third = _Third()
    try:
        with penguin_serve(tmp_path, {"responses": [[{"text": "x"}]]}) as other:
            context = browser.new_context()
            try:
                page = context.new_page()
                for srv in (server, other):
                    page.goto(srv.login_url)
                    page.wait_for_selector("table.sessions")
                page.goto(f"{third.base}/")
                assert "another app" in page.content()
                cookie = third.seen[-1].get("Cookie", "")
                names = sorted(c.split("=", 1)[0].strip() for c in cookie.split(";"))
                ports = sorted(s.base.rsplit(":", 1)[1] for s in (server, other))
                assert names == sorted(f"penguin_session_{p}" for p in ports)
                assert TOKEN not in cookie
                values = [c.split("=", 1)[1] for c in cookie.split(";")]
                for srv in (server, other):
                    attempts = [{"Cookie": cookie}]
                    attempts += [{"Authorization": f"Bearer {v}"} for v in values]
                    attempts += [{"Cookie": cookie, "X-Penguin-Key": v} for v in values]
                    with httpx.Client(base_url=srv.base, timeout=30) as thief:
                        for headers in attempts:
                            r = thief.get("/api/sessions", headers=headers)
                            assert r.status_code == 401, (srv.base, headers)
                # Both logins still work in the browser (neither cookie overwrote the other).
                for srv in (server, other):
                    page.goto(f"{srv.base}/#/")
                    page.wait_for_selector("table.sessions")
                    assert page.locator(".card.login").count() == 0
            finally:
                context.close()
    finally:
        third.close()
