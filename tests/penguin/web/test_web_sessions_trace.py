"""The sessions list, the cost figures and the trace view's span tree in a real Chromium
against a real ``penguin serve`` (R-WEB-1, R-WEB-4, R-SET-5, R-SUB-3), at 1280 and 390 px."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from webkit import Server, penguin_serve, shot

from eventstore import DataRoot

FIXTURES = Path(__file__).parents[3] / "fixtures" / "traces"
SCRIPT = {"responses": [[{"text": "Done: the notes say ship on friday."}]] * 4}
# The scripted model's price (USD per million tokens), as a user writes it in config.toml.
CONFIG = '[prices."script"]\ninput = 2000\noutput = 8000\n'
PARENT = "session-2026-12-02-04-17-57-993f0ae9"
_NAME = re.compile(r"(session-[\w-]+?)_(\d+)\.jsonl")
NO_OVERFLOW = "() => document.documentElement.scrollWidth <= window.innerWidth"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("web-sessions")
    with penguin_serve(tmp, SCRIPT, approve="allow-all", config=CONFIG) as s:
        # A recorded session whose run started two subagents at once (and their traces).
        root = DataRoot(s.home)
        for f in sorted((FIXTURES / "subagents_concurrent").rglob("*.jsonl")):
            m = _NAME.fullmatch(f.name)
            assert m is not None
            dest = root.trace_path(m.group(1), int(m.group(2)), date="2026-12-02")
            root.ensure_dir(dest.parent)
            dest.write_bytes(f.read_bytes())
        yield s


def _task(server: Server, sid: str, text: str) -> None:
    server.api("POST", f"/api/sessions/{sid}/tasks", {"input": [{"type": "text", "text": text}]})


def _wait_idle(page: Any, server: Server, sid: str) -> None:
    page.wait_for_function(
        """async ([sid, key]) => {
            const r = await fetch(`/api/sessions/${sid}`, {headers: {"x-penguin-key": key}});
            const row = await r.json();
            return row.state === "idle" && row.turns > 0;
        }""",
        arg=[sid, page.evaluate("localStorage.getItem('penguin.key')")],
    )


def test_r_web_1_list_titles_order_status_cost_search_and_delete(page: Any, server: Server) -> None:
    older = server.api("POST", "/api/sessions", {})["id"]
    newer = server.api("POST", "/api/sessions", {})["id"]
    _task(server, older, "Summarise the release notes")
    _wait_idle(page, server, older)
    row = page.locator(f"table.sessions tr[data-id='{older}']")
    # The first prompt instead of the raw id, the one status, the estimated cost.
    row.locator("a.title >> text=Summarise the release notes").wait_for()
    assert row.locator("td.state").inner_text() == "completed"
    assert row.locator(".cost").inner_text().startswith("$")
    # Most recently active first: the session that ran is above the one created after it.
    ids = page.locator("table.sessions tbody tr").evaluate_all("rs => rs.map(r => r.dataset.id)")
    assert ids.index(older) < ids.index(newer)
    untitled = page.locator(f"table.sessions tr[data-id='{newer}'] a.title")
    assert untitled.inner_text() == "(no prompt yet)"
    # The search box narrows the list as one types.
    page.fill("input.session-search", "release notes")
    page.wait_for_function(
        "() => document.querySelectorAll('table.sessions tbody tr[data-id]').length === 1"
    )
    # ... and lists the conversations whose text matches (the server's full-text index),
    # the matched words marked.
    hit = page.locator(f".search-results li[data-id='{older}']")
    hit.wait_for()
    assert hit.locator("mark").count() >= 1
    shot(page, "web-sessions-search")
    page.fill("input.session-search", "")
    # Delete asks first: Cancel keeps the session, Delete removes it.
    page.locator(f"tr[data-id='{newer}'] button.delete").click()
    dialog = page.locator("dialog.confirm")
    dialog.wait_for(state="visible")
    assert "cannot be undone" in dialog.inner_text()
    shot(page, "web-sessions-delete-confirm")
    dialog.locator("button.confirm-no").click()
    assert page.locator(f"tr[data-id='{newer}']").count() == 1
    page.locator(f"tr[data-id='{newer}'] button.delete").click()
    dialog.locator("button.confirm-yes").click()
    page.wait_for_selector(f"tr[data-id='{newer}']", state="detached")
    with server.client() as client:
        assert client.get(f"/api/sessions/{newer}").status_code == 404
    shot(page, "web-sessions-list")


def _archived_ids(server: Server) -> list[str]:
    with server.client() as client:
        rows = client.get("/api/sessions?archived=true").json()["sessions"]
    return [r["id"] for r in rows]


def test_archive_with_confirmation_then_unarchive_from_the_archived_view(
    page: Any, server: Server
) -> None:
    """Issue 35 item 6, with the keyboard: Archive asks first (Cancel keeps the session), the
    session leaves the list, the Archived view lists it with Unarchive, which brings it back.
    The flag is the trace's ``session_archived`` record (the server's answer proves it)."""
    sid = server.api("POST", "/api/sessions", {})["id"]
    _task(server, sid, "Draft the archive notes")
    _wait_idle(page, server, sid)
    row = page.locator(f"table.sessions tr[data-id='{sid}']")
    row.locator("a.title >> text=Draft the archive notes").wait_for()
    archive = row.locator("button.archive")
    assert archive.get_attribute("aria-label") == "Archive session Draft the archive notes"
    # Cancel keeps it (Escape closes the dialog).
    archive.focus()
    page.keyboard.press("Enter")
    dialog = page.locator("dialog.confirm")
    dialog.wait_for(state="visible")
    assert "Archived" in dialog.inner_text() and "Nothing is deleted" in dialog.inner_text()
    assert dialog.locator("button.confirm-yes").inner_text() == "Archive session"
    shot(page, "web-sessions-archive-confirm")
    page.keyboard.press("Escape")
    dialog.wait_for(state="hidden")
    assert row.count() == 1 and sid not in _archived_ids(server)
    # Confirmed with the keyboard: Cancel has the focus, Tab moves to Archive session.
    archive.focus()
    page.keyboard.press("Enter")
    dialog.wait_for(state="visible")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "primary confirm-yes"
    page.keyboard.press("Enter")
    row.wait_for(state="detached")
    assert sid in _archived_ids(server)
    # The Archived view lists it, with Unarchive.
    tab = page.locator("button.view-archived")
    assert tab.get_attribute("aria-pressed") == "false"
    tab.focus()
    page.keyboard.press("Enter")
    assert tab.get_attribute("aria-pressed") == "true"
    archived_row = page.locator(f"table.sessions tr[data-id='{sid}']")
    archived_row.wait_for()
    assert page.locator("table.sessions tbody tr[data-id]").count() == len(_archived_ids(server))
    assert archived_row.locator("td.state").inner_text() == "completed"  # still the last run's
    assert page.locator(".sessions-card h2").inner_text() == "Archived sessions"
    shot(page, "web-sessions-archived")
    # Opened, it says so in its header; the list's view starts at Sessions again.
    archived_row.locator("a.title").click()
    page.locator(".conv-info .info-archived").wait_for()
    page.goto(f"{server.base}/#/")
    page.locator("button.view-archived").click()
    archived_row.locator("button.unarchive").wait_for()
    unarchive = archived_row.locator("button.unarchive")
    assert unarchive.get_attribute("aria-label") == "Unarchive session Draft the archive notes"
    unarchive.click()
    archived_row.wait_for(state="detached")
    assert sid not in _archived_ids(server)
    if not _archived_ids(server):  # what the empty view says
        page.locator("table.sessions td.muted >> text=No archived sessions").wait_for()
    page.locator("button.view-active").click()
    page.locator(f"table.sessions tr[data-id='{sid}'] button.archive").wait_for()


def test_conversation_header_and_empty_state(page: Any, server: Server) -> None:
    sid = server.api("POST", "/api/sessions", {"approval": "ask"})["id"]
    page.goto(f"{server.base}/#/s/{sid}")
    hint = page.locator(".empty-hint")
    hint.wait_for(state="visible")
    assert "press Enter to send" in hint.inner_text()
    info = page.locator(".conv-info")
    page.wait_for_function("() => document.querySelector('.conv-info .info-approval')")
    text = info.inner_text()
    assert "Workspace" in text and "workspace" in text  # the server's --workspace directory
    assert "Approval ask" in text and "Sandbox" in text
    shot(page, "web-conversation-empty")


def test_r_web_4_usage_page_shows_cost_over_time_and_per_model(page: Any, server: Server) -> None:
    sid = server.api("POST", "/api/sessions", {})["id"]
    _task(server, sid, "One more")
    _wait_idle(page, server, sid)
    page.click("text=Usage")
    page.wait_for_selector(".chart[data-chart=cost] svg.cost-bars g.bar rect")
    assert page.locator(".chart[data-chart=cost] .total .cost").inner_text().startswith("$")
    models = page.locator(".cost-table table.costs tr[data-key]")
    page.wait_for_function("() => document.querySelectorAll('table.costs tr[data-key]').length > 1")
    priced = [t for t in models.all_inner_texts() if t.startswith("script")]
    assert priced and "$" in priced[0]
    shot(page, "web-usage-cost")


def test_r_web_4_span_tree_nests_concurrent_subagents(page: Any, server: Server) -> None:
    page.goto(f"{server.base}/#/s/{PARENT}/trace")
    page.wait_for_selector("ul.span-tree li.kind-run")
    calls = page.locator("li.kind-tool_call[data-subagent]")
    assert calls.count() == 2
    children = set()
    for i in range(2):
        call = calls.nth(i)
        children.add(call.get_attribute("data-subagent"))
        # Each call holds its subagent's own run, in the child session, with its own turns.
        child_run = call.locator(":scope > ul > li.kind-run")
        assert child_run.count() == 1
        assert child_run.get_attribute("data-session") == call.get_attribute("data-subagent")
        row = call.locator(":scope > .span-row")
        assert re.search(r"\d+(\.\d+)? (ms|s)", row.locator(".lat").inner_text())
        assert row.locator(".tok").inner_text().endswith("tok")
    assert len(children) == 2
    # A request span leads to its record and the exact request there.
    page.locator("li.kind-request > .span-row button.at").first.click()
    page.wait_for_selector(".context .request-title")
    shot(page, "web-trace-spans")


def test_the_span_tree_follows_a_task_as_it_runs(page: Any, server: Server) -> None:
    sid = server.api("POST", "/api/sessions", {})["id"]
    page.goto(f"{server.base}/#/s/{sid}/trace")
    page.wait_for_selector(".span-body >> text=No runs yet")
    _task(server, sid, "Go")
    # No reload: the session's stream redraws the tree when the run's records arrive.
    page.wait_for_selector("ul.span-tree li.kind-run.st-completed li.kind-request")
    assert page.locator("ul.span-tree li.kind-run").count() == 1


@pytest.mark.parametrize("where", ["sessions", "archived", "trace", "usage"])
def test_phone_width_has_no_horizontal_overflow(browser: Any, server: Server, where: str) -> None:
    context = browser.new_context(
        viewport={"width": 390, "height": 844},
        device_scale_factor=2,
        is_mobile=True,
        has_touch=True,
    )
    try:
        page = context.new_page()
        page.goto(server.login_url)
        page.wait_for_selector("table.sessions tbody tr[data-id]")
        if where == "archived":  # the Archived view, with a session in it
            sid = server.api("POST", "/api/sessions", {})["id"]
            _task(server, sid, "An archived session on a phone")
            _wait_idle(page, server, sid)
            server.api("POST", f"/api/sessions/{sid}/archive", {"archived": True})
            page.click("button.view-archived")
            page.wait_for_selector(f"table.sessions tr[data-id='{sid}'] button.unarchive")
        elif where == "trace":
            page.goto(f"{server.base}/#/s/{PARENT}/trace")
            page.wait_for_selector("ul.span-tree li.kind-tool_call")
        elif where == "usage":
            page.click("text=Usage")
            page.wait_for_selector(".chart[data-chart=model] svg")
        assert page.evaluate(NO_OVERFLOW), page.evaluate("document.documentElement.scrollWidth")
        shot(page, f"web-{where}-mobile")
    finally:
        context.close()
