"""The Web App's "Rewind to here" (SPEC §27, R-SNAP-2) in a real Chromium against a real
``penguin serve``: the plan is shown before anything is written, then the workspace is restored
and the page moves to the fork."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from snapkit import record_with_snapshots
from webkit import Server, penguin_serve, shot

RECORDED = {
    "responses": [
        [{"tool_call": {"name": "write_file", "arguments": {"path": "plan.md", "content": "v1"}}}],
        [{"text": "First draft written."}],
        [{"tool_call": {"name": "exec_command", "arguments": {"cmd": "echo v2 > plan.md"}}}],
        [{"text": "Second draft written."}],
    ]
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("web-rewind")
    (tmp / "workspace").mkdir()
    anyio.run(
        record_with_snapshots,
        tmp / "home",
        tmp / "workspace",
        RECORDED,
        ("Write a first draft.", "Write a second one."),
    )
    with penguin_serve(tmp, {"responses": []}, approve="ask") as s:
        yield s


def test_r_snap_2_rewind_to_here_shows_the_plan_then_restores(page: Any, server: Server) -> None:
    [row] = server.api("GET", "/api/sessions")["sessions"]
    workspace = server.home.parent / "workspace"
    assert (workspace / "plan.md").read_text() == "v2\n"
    page.goto(f"{server.base}/#/s/{row['id']}")
    first = page.locator(".b-assistant:has-text('First draft written') button.rewind")
    first.wait_for()
    # The dialog opens after the plan's request: the click must not wait for navigations while
    # the dialog (which blocks the page) waits for us.
    with page.expect_event("dialog") as shown:
        first.click(no_wait_after=True)
    question = shown.value.message
    shown.value.dismiss()
    assert "end of task 1" in question and "change plan.md" in question
    assert (workspace / "plan.md").read_text() == "v2\n"  # dismissed: nothing written

    first_url = page.url
    with page.expect_event("dialog") as shown:
        first.click(no_wait_after=True)
    shown.value.accept()
    page.wait_for_function("(u) => location.href !== u", arg=first_url)
    page.wait_for_selector(".b-assistant >> text=First draft written")
    assert page.locator(".b-assistant:has-text('Second draft written')").count() == 0
    assert (workspace / "plan.md").read_text() == "v1"
    shot(page, "web-rewind")
