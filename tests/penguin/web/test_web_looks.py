"""How the Web App looks to a person (R-WEB-6, issue 35): every page at 1280 and 390 px, light and
dark, in a real Chromium: no horizontal overflow, no serious or critical axe-core violation, a
screenshot of each under build/screenshots/; Markdown tables and a 300-character word; the
theme toggle remembered; a session created and a message sent with the keyboard alone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from webkit import Server, penguin_serve, shot, watch

LONG_WORD = "x" * 300
REPLY = (
    "## Files\n\nThere are **two** files:\n\n"
    "| name | size | kind |\n|:-----|-----:|:----:|\n| `a.txt` | 12 | text |\n| b.txt | 3,400 | *data* |\n\n"
    f"A very long word: {LONG_WORD}\n\n"
    "```sh\nls -l\n```\n\n- one\n- two\n"
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
            {"thinking": "List the files."},
            {"text": "Let me look."},
            {
                "tool_call": {
                    "name": "exec_command",
                    "arguments": {"cmd": "ls"},
                    "result": {"output": "a.txt\nb.txt\n"},
                }
            },
        ],
        [{"text": REPLY}],
        [{"text": "Sent with the keyboard."}],
    ],
}
WIDTHS = {"desktop": {"width": 1280, "height": 900}, "mobile": {"width": 390, "height": 844}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with penguin_serve(tmp_path_factory.mktemp("web-looks"), SCRIPT, approve="allow-all") as s:
        yield s


def _ran(server: Server, prompt: str) -> str:
    sid: str = server.api("POST", "/api/sessions", {"approval": "allow-all"})["id"]
    with server.client() as c, c.stream("GET", "/api/events") as events:
        server.api(
            "POST", f"/api/sessions/{sid}/tasks", {"input": [{"type": "text", "text": prompt}]}
        )
        for line in events.iter_lines():  # until the session is idle again
            if '"session_state"' in line and f'"{sid}"' in line and '"idle"' in line:
                break
    return sid


@pytest.fixture(scope="module")
def session(server: Server) -> str:
    """A session with a finished task: a tool call, a table, a long word, code and a list."""
    return _ran(server, "Files?")


@pytest.fixture(scope="module")
def archived(server: Server, session: str) -> str:
    """A second finished session, archived (the Archived view's row)."""
    sid = _ran(server, "Which files are old?")
    server.api("POST", f"/api/sessions/{sid}/archive", {"archived": True})
    return sid


def _context(browser: Any, size: str, scheme: str) -> Any:
    mobile = size == "mobile"
    return browser.new_context(
        viewport=WIDTHS[size],
        device_scale_factor=3 if mobile else 1,
        is_mobile=mobile,
        has_touch=mobile,
        color_scheme=scheme,
    )


def _overflow(page: Any) -> dict[str, Any]:
    """What sticks out to the right: the page's scroll width and the widest elements."""
    result: dict[str, Any] = page.evaluate(
        """() => {
          const root = document.documentElement;
          const wide = [...document.querySelectorAll('body *')]
            .filter((el) => el.getBoundingClientRect().right > root.clientWidth + 1
              && !el.closest('.pane, .table-wrap, pre, .records'))
            .slice(0, 5).map((el) => el.tagName + '.' + el.className);
          return {scroll: root.scrollWidth, client: root.clientWidth, wide};
        }"""
    )
    return result


# Every picture this module saves, named as docs/ refers to them (tests/docs checks the names).
SHOTS = {
    f"web-{page}{mobile}{dark}{screen}"
    for page in ("login", "sessions", "archived", "conversation", "trace", "usage")
    for mobile, screens in (("", ("",)), ("-mobile", ("", "-screen")))
    for dark in ("", "-dark")
    for screen in screens
}
IN_DOCS = (
    "web-conversation-dark",
    "web-sessions-mobile-screen",
    "web-conversation-mobile-dark-screen",
)
assert set(IN_DOCS) <= SHOTS

PAGES = {
    "login": ("#/", ".login"),  # no login yet: what to open
    "sessions": ("#/", "table.sessions tbody tr[data-id]"),
    "archived": ("#/", "table.sessions tbody tr[data-id]"),  # then the Archived view
    "conversation": ("#/s/{sid}", ".b-assistant table"),
    "trace": ("#/s/{sid}/trace", ".timeline svg"),
    "usage": ("#/usage", ".chart svg"),
}


@pytest.mark.parametrize("size", ["desktop", "mobile"])
@pytest.mark.parametrize("name", list(PAGES))
def test_every_page_fits_the_width_passes_axe_and_is_shot(
    browser: Any, server: Server, session: str, archived: str, name: str, size: str
) -> None:
    """Light, then dark (the system setting switched on the open page, as a person's would)."""
    from axe_playwright_python.sync_playwright import Axe

    context = _context(browser, size, "light")
    try:
        page = context.new_page()
        page.set_default_timeout(20_000)
        watched = watch(page)
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        if name != "login":
            page.goto(server.login_url)
            page.wait_for_selector("table.sessions")
        path, ready = PAGES[name]
        page.goto(f"{server.base}/{path.format(sid=session)}")
        page.wait_for_selector(ready)
        if name == "archived":  # the Archived view, with its Unarchive button
            page.click("button.view-archived")
            page.wait_for_selector(f"tr[data-id='{archived}'] button.unarchive")
        if name == "trace":  # with the exact request of a picked record in the second pane
            page.locator(".records li.record:has-text('request_begin') button").first.click()
            page.wait_for_selector(".detail .request-title")
        if name == "usage":  # three charts, each from its own request
            page.wait_for_function("() => document.querySelectorAll('.chart svg').length === 3")
        background = []
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            dark = page.evaluate("() => matchMedia('(prefers-color-scheme: dark)').matches")
            assert dark == (scheme == "dark")
            background.append(
                page.evaluate("() => getComputedStyle(document.body).backgroundColor")
            )

            fit = _overflow(page)
            assert fit["scroll"] <= fit["client"], f"{name} {size} {scheme} overflows: {fit}"

            results = Axe().run(page)
            impacts = ("serious", "critical")
            bad = [v for v in results.response["violations"] if v["impact"] in impacts]
            assert not bad, f"{scheme}: " + results.generate_report()

            page.evaluate("() => window.scrollTo(0, 0)")  # sticky header and composer in place
            suffix = ("-mobile" if size == "mobile" else "") + ("-dark" if dark else "")
            shot(page, f"web-{name}{suffix}")
            assert f"web-{name}{suffix}" in SHOTS
            if size == "mobile":  # what a phone shows first
                shot(page, f"web-{name}{suffix}-screen", full_page=False)
        assert background[0] != background[1]
        # axe-core came with the package: nothing was fetched from anywhere but the server.
        assert all(u.startswith(server.base) or u.startswith(("data:", "blob:")) for u in requests)
        if name == "login":  # the page asked the API and was told to log in: that is the page
            watched.errors = [e for e in watched.errors if "status of 401" not in e]
        watched.check()
    finally:
        context.close()


def test_markdown_tables_render_and_a_long_word_wraps(
    page: Any, server: Server, session: str
) -> None:
    page.goto(f"{server.base}/#/s/{session}")
    table = page.locator(".b-assistant table").first
    table.wait_for()
    assert table.locator("th").all_inner_texts() == ["name", "size", "kind"]
    assert table.locator("tbody tr").count() == 2
    assert table.locator("td code").inner_text() == "a.txt"
    assert table.locator("td").nth(4).get_attribute("data-align") == "right"
    assert table.locator("td em").inner_text() == "data"
    assert "|" not in page.locator(".b-assistant").last.inner_text()
    fit = _overflow(page)
    assert fit["scroll"] <= fit["client"], fit


def test_the_theme_toggle_is_remembered(page: Any, server: Server) -> None:
    background = "() => getComputedStyle(document.body).backgroundColor"
    light = page.evaluate(background)
    toggle = page.locator("#theme")
    assert toggle.inner_text() == "Theme: auto"
    toggle.click()
    assert toggle.inner_text() == "Theme: dark"
    assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
    dark = page.evaluate(background)
    assert dark != light
    page.reload()
    page.wait_for_selector("table.sessions")
    assert page.locator("#theme").inner_text() == "Theme: dark"
    assert page.evaluate(background) == dark  # remembered, applied before the page's modules
    page.locator("#theme").click()
    assert page.evaluate("() => document.documentElement.dataset.theme") == "light"
    page.locator("#theme").click()
    assert page.locator("#theme").inner_text() == "Theme: auto"
    assert page.evaluate("() => localStorage.getItem('penguin.theme')") is None


def _tab_to(page: Any, selector: str, limit: int = 40) -> None:
    """Press Tab until ``selector`` has the focus, which must show (a visible outline)."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("(s) => document.activeElement.matches(s)", selector):
            outline = page.evaluate(
                "() => { const s = getComputedStyle(document.activeElement);"
                " return [s.outlineStyle, s.outlineWidth]; }"
            )
            assert outline[0] != "none" and outline[1] != "0px", outline
            return
    raise AssertionError(f"Tab never reached {selector}")


def test_keyboard_only_create_a_session_and_send(page: Any, server: Server) -> None:
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.className") == "skip"
    _tab_to(page, "select[name=approval]")
    page.keyboard.press("ArrowDown")  # ask -> allow-all
    assert page.locator("select[name=approval]").input_value() == "allow-all"
    _tab_to(page, "button[type=submit]")
    page.keyboard.press("Enter")
    page.wait_for_selector(".composer textarea")
    _tab_to(page, ".composer textarea")
    page.keyboard.type("first line")
    page.keyboard.press("Shift+Enter")  # a new line, not a send
    page.keyboard.type("second line")
    assert page.locator(".composer textarea").input_value() == "first line\nsecond line"
    assert "Shift+Enter" in page.locator("#composer-hint").inner_text()
    page.keyboard.press("Enter")
    page.wait_for_selector(".b-user >> text=second line")
    page.wait_for_selector(".tag.state[data-state=idle]")
    assert page.locator(".b-user .body").first.inner_text() == "first line\nsecond line"


def test_at_phone_width_the_trace_panes_stack_and_the_sessions_table_is_a_list(
    browser: Any, server: Server, session: str
) -> None:
    context = _context(browser, "mobile", "light")
    try:
        page = context.new_page()
        page.goto(server.login_url)
        row = page.locator(f"table.sessions tr[data-id='{session}']")
        row.wait_for()
        # Measured in one go: the list is rebuilt whenever a session changes.
        layout = page.evaluate(
            """(id) => {
              const tr = document.querySelector(`table.sessions tr[data-id="${id}"]`);
              const [a, b] = [...tr.querySelectorAll('td')].map((td) => td.getBoundingClientRect());
              return {head: getComputedStyle(document.querySelector('table.sessions thead')).display,
                      row: getComputedStyle(tr).display, below: b.top >= a.bottom - 1};
            }""",
            session,
        )
        # No header row; each session a block, its details below the title, not beside it.
        assert layout == {"head": "none", "row": "block", "below": True}

        page.goto(f"{server.base}/#/s/{session}/trace")
        page.wait_for_selector(".records li.record")
        records, detail = (b.bounding_box() for b in page.locator(".split > .pane").all())
        assert records["x"] == detail["x"] and detail["y"] >= records["y"] + records["height"]
        assert records["width"] <= 390
    finally:
        context.close()
