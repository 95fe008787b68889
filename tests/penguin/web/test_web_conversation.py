"""The Web App's conversation page in a real Chromium against a real ``penguin serve``
(R-WEB-1/2/3/5/6): create a session, a streamed task with a tool call approved in the page,
steer, reload mid-task, fork."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from webkit import Server, penguin_serve, shot

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
            {"thinking": "Plan: list the files."},
            {"text": ["Let me ", "look at ", "the **files**."]},
            {
                "tool_call": {
                    "name": "exec_command",
                    "arguments": {"cmd": "ls"},
                    "result": {"output": "a.txt\nb.txt\n"},
                }
            },
        ],
        [{"text": "All done: *two* files."}],
        # A compaction's summary (and the wrap-up round of the goal test).
        [{"text": "[summary]The user asked for the files; there are two.[/summary]"}],
    ],
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with penguin_serve(tmp_path_factory.mktemp("web-conv"), SCRIPT, approve="ask") as s:
        yield s


def test_r_web_1_login_removes_the_token_and_sets_a_strict_csp(page: Any, server: Server) -> None:
    assert "token" not in page.url
    response = page.request.get(server.base + "/")
    csp = response.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    assert "unsafe-inline" not in csp
    # The list is live: a session created elsewhere appears without a reload.
    sid = server.api("POST", "/api/sessions", {})["id"]
    page.wait_for_selector(f"table.sessions tr[data-id='{sid}']")
    shot(page, "web-sessions")


def test_r_web_2_stream_tool_call_approval_and_fork(page: Any, server: Server) -> None:
    page.select_option("select[name=approval]", "ask")
    page.click("text=Create session")
    page.wait_for_selector(".compact-why >> text=nothing to compact yet")
    assert page.locator("button.compact").is_disabled()
    page.fill(".composer textarea", "What files are there?")
    page.click("button.send")
    # Streamed text, then the tool call waiting for the user's decision.
    page.wait_for_selector(".b-assistant >> text=Let me look at the")
    tool = page.locator(".tool").first
    tool.locator("button.approve").wait_for()
    assert tool.locator(".tool-name").inner_text() == "exec_command"
    assert '"cmd": "ls"' in tool.locator(".args").inner_text()
    assert page.locator(".b-thinking summary").first.inner_text().startswith("Thinking")
    assert page.locator(".b-assistant strong").first.inner_text() == "files"
    shot(page, "web-approval")
    tool.locator("button.approve").click()
    page.wait_for_selector(".tool .output >> text=a.txt")
    page.wait_for_selector(".b-assistant >> text=All done:")
    page.wait_for_selector(".tag.state[data-state=idle]")
    assert page.locator(".tool .tag.decision").inner_text() == "approved"
    page.wait_for_selector("button.compact:not([disabled])")  # a turn to compact now
    shot(page, "web-conversation")
    first_url = page.url

    # Fork from the completed final reply: a new session holding the history so far.
    page.locator(".b-assistant:has-text('All done') button.fork").click()
    page.wait_for_function("(u) => location.href !== u", arg=first_url)
    page.wait_for_selector(".b-assistant >> text=All done:")
    assert page.url != first_url
    assert page.locator(".b-user").first.inner_text().endswith("What files are there?")
    shot(page, "web-fork")


def test_r_web_3_steer_while_waiting_and_reload_mid_task(page: Any, server: Server) -> None:
    row = server.api("POST", "/api/sessions", {"approval": "ask"})
    page.goto(f"{server.base}/#/s/{row['id']}")
    page.fill(".composer textarea", "List them")
    page.click("button.send")
    page.locator(".tool button.approve").wait_for()
    text_before = page.locator(".b-assistant").first.inner_text()

    # A reload in the middle of the task shows the same page: text and the pending approval.
    page.reload()
    page.locator(".tool button.approve").wait_for()
    assert page.locator(".b-assistant").first.inner_text() == text_before
    assert page.locator(".tag.state").inner_text() != "idle"

    page.fill(".composer textarea", "Also count them")
    page.click("button.steer")
    page.wait_for_function("() => document.querySelector('.composer textarea').value === ''")
    page.click(".tool button.approve")
    page.wait_for_selector(".b-user >> text=Also count them")
    page.wait_for_selector(".b-assistant >> text=All done:")
    shot(page, "web-steer")


def _task_done(page: Any, server: Server) -> str:
    sid: str = server.api("POST", "/api/sessions", {"approval": "allow-all"})["id"]
    page.goto(f"{server.base}/#/s/{sid}")
    page.fill(".composer textarea", "What files are there?")
    page.click("button.send")
    page.wait_for_selector(".b-assistant >> text=All done:")
    page.wait_for_selector(".tag.state[data-state=idle]")
    return sid


def test_r_web_4_trace_view_timeline_and_the_request_at_a_record(page: Any, server: Server) -> None:
    _task_done(page, server)
    page.click("text=Trace view")
    page.wait_for_selector(".records li.record")
    assert page.locator(".files button.file").count() == 1
    assert page.locator(".findings").inner_text() == "Validator: no findings in this file."
    # The timeline: both request spans and the tool call as shapes on a time axis.
    assert page.locator(".timeline-svg rect.span.request").count() == 2
    assert page.locator(".timeline-svg rect.call").count() == 1
    assert page.locator(".timeline-svg text.tick").count() == 5
    positions = page.locator(".records li.record button.at").all_inner_texts()
    assert positions[:3] == ["1:0", "1:1", "1:2"]
    # The second request: the user text, the thinking, the reply, the call and its (new) output.
    page.locator(".records li.record:has-text('request_begin') button.at").last.click()
    page.wait_for_selector(".context .request-title")
    messages = page.locator(".req-messages > li").all_inner_texts()
    assert len(messages) == 5
    assert "What files are there?" in messages[0]
    assert messages[4].startswith("user tool_call_output") and "a.txt" in messages[4]
    assert page.locator(".req-messages > li.new").count() == 1
    shot(page, "web-trace")


def test_r_web_4_usage_page_draws_its_charts(page: Any, server: Server) -> None:
    _task_done(page, server)
    page.click("text=Usage")
    for chart in ("time", "session", "model"):
        page.wait_for_selector(f".chart[data-chart={chart}] svg.bars g.bar rect")
    models = page.locator(".chart[data-chart=model] svg.bars g.bar").count()
    assert models == 1  # one scripted model
    assert page.locator(".chart[data-chart=session] svg.bars g.bar").count() >= 1
    shot(page, "web-usage")


PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def test_r_web_3_pasted_image_is_sent_with_the_text(page: Any, server: Server) -> None:
    sid = server.api("POST", "/api/sessions", {})["id"]
    page.goto(f"{server.base}/#/s/{sid}")
    page.fill(".composer textarea", "What is in this picture?")
    page.evaluate(
        """(b64) => {
          const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
          const data = new DataTransfer();
          data.items.add(new File([bytes], "shot.png", { type: "image/png" }));
          const ev = new ClipboardEvent("paste", { clipboardData: data, bubbles: true });
          document.querySelector(".composer textarea").dispatchEvent(ev);
        }""",
        PNG_1PX,
    )
    page.wait_for_selector(".thumbs img")
    page.click("button.send")
    page.locator(".tool button.approve").wait_for()
    image = page.locator(".b-image img.shot")
    assert image.count() == 1
    assert image.get_attribute("src") == f"data:image/png;base64,{PNG_1PX}"
    assert page.locator(".thumbs img").count() == 0  # the composer was cleared
    page.click(".tool button.approve")
    page.wait_for_selector(".b-assistant >> text=All done:")


def test_r_web_3_goal_mode_with_a_budget_shows_its_rounds(page: Any, server: Server) -> None:
    sid = server.api("POST", "/api/sessions", {"approval": "allow-all"})["id"]
    page.goto(f"{server.base}/#/s/{sid}")
    page.check("input.goal-on")
    page.fill("input.budget", "1")
    page.fill(".composer textarea", "Make the files")
    page.click("button.send")
    # Round 1 spends more than the budget: one wrap-up round, then budget_limited.
    page.wait_for_selector(".notice.goal >> text=Goal budget_limited after 2 rounds")
    assert page.locator(".tag.goal-round").all_inner_texts() == ["goal round 1", "goal round 2"]
    assert page.locator(".b-user .plain").first.inner_text() == "Make the files"
    page.wait_for_selector(".tag.goal >> text=goal budget_limited · 2 rounds")
    shot(page, "web-goal")


def test_r_web_3_deny_a_call(page: Any, server: Server) -> None:
    sid = server.api("POST", "/api/sessions", {"approval": "ask"})["id"]
    page.goto(f"{server.base}/#/s/{sid}")
    page.fill(".composer textarea", "List them")
    page.click("button.send")
    page.click(".tool button.deny")
    page.wait_for_selector(".tool .tag.decision.deny")
    page.wait_for_selector(".b-assistant >> text=All done:")
    assert page.locator(".tool button.approve").count() == 0
    assert "denied" in page.locator(".tool .tag").first.inner_text()


def test_r_web_3_compact_then_disabled_with_the_reason(page: Any, server: Server) -> None:
    _task_done(page, server)
    page.wait_for_selector("button.compact:not([disabled])")
    page.click("button.compact")
    page.wait_for_selector(".notice.compaction >> text=Compaction started (manual")
    page.wait_for_selector(".notice.compaction >> text=Compaction completed")
    # The summary and the prompt are folded under the compaction, not shown as a reply.
    assert page.locator(".b-folded summary").all_inner_texts() == [
        "Compaction summary",
        "Compaction prompt",
    ]
    assert page.locator(".b-assistant >> text=[summary]").count() == 0
    page.wait_for_selector(".compact-why >> text=the context was just compacted")
    assert page.locator("button.compact").is_disabled()
    shot(page, "web-compacted")


def test_r_box_3_the_form_chooses_the_sandbox_and_the_header_shows_it(
    page: Any, server: Server
) -> None:
    """SPEC R-BOX-1/3: the new-session form sends the sandbox; the header shows it, `off` loud."""
    page.select_option("select[name=sandbox]", "read-only")
    page.click("text=Create session")
    tag = page.locator(".tag.sandbox")
    tag.wait_for()
    page.wait_for_selector(".tag.sandbox >> text=sandbox read-only · network off")
    assert "off" not in (tag.get_attribute("class") or "").split()
    page.goto(server.base + "/#/")
    page.wait_for_selector("table.sessions")
    page.select_option("select[name=sandbox]", "off")
    page.click("text=Create session")
    page.wait_for_selector(".tag.sandbox.off >> text=sandbox OFF")
