"""Subagents in the Web App (issue 35 item 8, R-WEB-2, R-SRV-6): a session created with the
form's "Subagents" box offers ``run_subagent``; a task whose script starts two subagents at once
shows each child's text streaming under the call that started it while the child still runs,
the same after a reload in the middle of the task, and after the run — at 1280 and 390 px.

The children's model streams half a segment and waits for the test (an event, never a sleep),
so "still running" is a fact, not a race.  The parent's model is a script served as a
provider's model would be, so the server makes its children with its own factory (the same kind
of model, as ``penguin serve`` does).  The app runs in process on a real uvicorn; Chromium is
driven with Playwright's async API in the same event loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from serverkit import TOKEN, scripted, served
from webkit import CHROMIUM, SCREENSHOTS, require_chromium

from engine import LLMOutcome, LLMRequest
from engine.llm import ScriptedLLM
from eventstore import OmniMessage, TextPayload
from eventstore import builders as b


def spawn(prompt: str, cid: str) -> dict[str, Any]:
    return {"tool_call": {"name": "run_subagent", "arguments": {"prompt": prompt}, "id": cid}}


PARENT = [
    [{"text": "Delegating to two subagents."}, spawn("alpha", "p1"), spawn("beta", "p2")],
    [{"text": "Both subagents are done."}],
]


class _Delegating:
    """The parent: the script above, behind a model that is not a ``ScriptedLLM``."""

    vision = True

    def __init__(self) -> None:
        self.script = ScriptedLLM(PARENT)

    async def stream(self, request: LLMRequest) -> AsyncIterator[OmniMessage | LLMOutcome]:
        async for item in self.script.stream(request):
            yield item


class _Child:
    """A subagent: a whole sentence, then half of one; the rest once its gate opens."""

    vision = True

    def __init__(self, gates: dict[str, anyio.Event]) -> None:
        self.gates = gates

    async def stream(self, request: LLMRequest) -> AsyncIterator[OmniMessage | LLMOutcome]:
        prompt = [
            m.payload.text
            for m in request.messages
            if isinstance(m.payload, TextPayload) and m.payload.role == "user"
        ][-1]
        yield b.partial_text("start")
        yield b.partial_text("delta", f"{prompt}: plan made")
        yield b.partial_text("stop")
        yield b.assistant_text(f"{prompt}: plan made")
        yield b.partial_text("start")
        yield b.partial_text("delta", f"{prompt} working")
        await self.gates[prompt].wait()
        yield b.partial_text("delta", " and finished")
        yield b.partial_text("stop")
        yield b.assistant_text(f"{prompt} working and finished")
        yield LLMOutcome("completed")


WIDTHS = {"desktop": {"width": 1280, "height": 900}, "mobile": {"width": 390, "height": 844}}


def call(cid: str) -> str:
    return f'.b-tool[data-call-id="{cid}"]'


async def nested(page: Any, cid: str) -> list[str]:
    texts: list[str] = await page.locator(f"{call(cid)} .nested-msg.assistant").all_inner_texts()
    return texts


async def fits(page: Any) -> None:
    width = await page.evaluate("document.documentElement.scrollWidth")
    client = await page.evaluate("document.documentElement.clientWidth")
    assert width <= client, f"the page is {width} px wide in a {client} px window"


@pytest.mark.anyio
@pytest.mark.parametrize("size", ["desktop", "mobile"])
async def test_subagent_text_streams_under_its_call_live_after_a_reload_and_after_the_run(
    tmp_path: Path, size: str
) -> None:
    require_chromium()
    from playwright.async_api import async_playwright

    gates = {"alpha": anyio.Event(), "beta": anyio.Event()}
    made: list[object] = []

    def factory(model: str | None) -> Any:
        llm = _Delegating() if not made else _Child(gates)
        made.append(llm)
        return llm

    suffix = "-mobile" if size == "mobile" else ""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    async with (
        served(tmp_path, llm_factory=factory, approval="allow-all", idle_release=None) as s,
        async_playwright() as p,
    ):
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            mobile = size == "mobile"
            context = await browser.new_context(
                viewport=WIDTHS[size],
                device_scale_factor=3 if mobile else 1,
                is_mobile=mobile,
                has_touch=mobile,
            )
            page = await context.new_page()
            page.set_default_timeout(20_000)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            await page.goto(f"{s.base}/#token={TOKEN}")
            await page.wait_for_selector("table.sessions")

            # The new-session form: subagents are off unless ticked.
            box = page.get_by_label("Subagents")
            assert not await box.is_checked()
            await box.check()
            await page.select_option("select[name=approval]", "allow-all")
            await page.click("form.new-session button[type=submit]")
            await page.wait_for_selector(".conv-info .info-subagents >> text=on")
            await page.fill(".composer textarea", "Delegate both")
            await page.click("button.send")

            # Live: each child's text under its own call while both still run.
            for cid, name in (("p1", "alpha"), ("p2", "beta")):
                await page.wait_for_selector(
                    f"{call(cid)} .nested-msg.streaming >> text={name} working"
                )
            live = {cid: await nested(page, cid) for cid in ("p1", "p2")}
            assert live == {
                "p1": ["alpha: plan made", "alpha working"],
                "p2": ["beta: plan made", "beta working"],
            }
            await fits(page)
            await page.screenshot(path=str(SCREENSHOTS / f"web-subagents-live{suffix}.png"))

            # A reload in the middle of the task shows the same, still streaming.
            await page.reload()
            for cid, name in (("p1", "alpha"), ("p2", "beta")):
                await page.wait_for_selector(
                    f"{call(cid)} .nested-msg.streaming >> text={name} working"
                )
            assert {cid: await nested(page, cid) for cid in ("p1", "p2")} == live

            # The trace view opened mid-task: each child's text under its call in the span tree.
            conversation = page.url
            await page.goto(f"{conversation}/trace")
            for name in ("alpha", "beta"):
                await page.wait_for_selector(
                    f"li.kind-tool_call[data-subagent] > .subagent-live >> text={name} working"
                )
            await page.goto(conversation)
            for cid, name in (("p1", "alpha"), ("p2", "beta")):
                await page.wait_for_selector(
                    f"{call(cid)} .nested-msg.streaming >> text={name} working"
                )

            # One child ends while the other still streams.
            gates["alpha"].set()
            await page.wait_for_selector(
                f"{call('p1')} .nested-msg:not(.streaming) >> text=alpha working and finished"
            )
            assert await page.locator(f"{call('p2')} .nested-msg.streaming").count() == 1
            gates["beta"].set()
            await page.wait_for_selector(".b-assistant >> text=Both subagents are done.")
            await page.wait_for_selector(".tag.state[data-state=idle]")
            done = {
                "p1": ["alpha: plan made", "alpha working and finished"],
                "p2": ["beta: plan made", "beta working and finished"],
            }
            assert {cid: await nested(page, cid) for cid in ("p1", "p2")} == done
            assert await page.locator(".nested-msg.streaming").count() == 0
            await page.screenshot(
                path=str(SCREENSHOTS / f"web-subagents-done{suffix}.png"), full_page=True
            )

            # After the run a reload shows each child as a link to its own session.
            await page.reload()
            await page.wait_for_selector(".b-assistant >> text=Both subagents are done.")
            children = await page.locator(".b-tool .nested[data-child]").evaluate_all(
                "(els) => els.map((el) => el.dataset.child)"
            )
            assert len(set(children)) == 2  # each call its own child
            await fits(page)
            assert errors == []
        finally:
            await browser.close()
    assert len(made) == 3  # the parent and one model per child, made by the server's factory


@pytest.mark.anyio
@pytest.mark.parametrize("size", ["desktop", "mobile"])
async def test_a_subagents_tool_call_is_approved_under_the_call_that_started_it(
    tmp_path: Path, size: str
) -> None:
    """R-SUB-5 with ``ask``: the child's call waits for a person, who answers it where the
    subagent works — under its call — not on a block of the parent's."""
    require_chromium()
    from playwright.async_api import async_playwright

    child = [
        [
            {
                "tool_call": {
                    "name": "write_file",
                    "arguments": {"path": "from-child.txt", "content": "hi"},
                    "id": "p1",  # the same id as its parent's call: still asked as its own
                }
            }
        ],
        [{"text": "The child wrote the file."}],
    ]
    parent = [[spawn("write it", "p1")], [{"text": "Delegated and done."}]]
    suffix = "-mobile" if size == "mobile" else ""
    async with (
        served(tmp_path, llm_factory=scripted(*parent, subagent=child), approval="ask") as s,
        async_playwright() as p,
    ):
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            mobile = size == "mobile"
            context = await browser.new_context(
                viewport=WIDTHS[size],
                device_scale_factor=3 if mobile else 1,
                is_mobile=mobile,
                has_touch=mobile,
            )
            page = await context.new_page()
            page.set_default_timeout(20_000)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            await page.goto(f"{s.base}/#token={TOKEN}")
            await page.wait_for_selector("table.sessions")
            sid = await s.new_session(subagents=True)
            await page.goto(f"{s.base}/#/s/{sid}")
            await page.fill(".composer textarea", "Delegate")
            await page.click("button.send")
            head = f"{call('p1')} > .approval button.approve"
            await page.click(head)  # the parent's run_subagent call
            asked = f"{call('p1')} .nested-msg.approval.pending"
            await page.wait_for_selector(f"{asked} >> text=write_file")
            assert await page.locator(".b-tool").count() == 1  # no block of its own
            # The header lists only what applies (it once wrote "null" for what did not).
            assert "null" not in await page.locator(".conv-info").inner_text()
            await page.screenshot(path=str(SCREENSHOTS / f"web-subagent-approval{suffix}.png"))
            await page.click(f"{asked} button.approve")
            await page.wait_for_selector(".b-assistant >> text=Delegated and done.")
            await page.wait_for_selector(".tag.state[data-state=idle]")
            decided = page.locator(f"{call('p1')} .nested-msg.approval")
            assert await decided.locator(".tag").inner_text() == "approved"
            assert (tmp_path / "from-child.txt").read_text() == "hi"
            await fits(page)
            assert errors == []
        finally:
            await browser.close()


@pytest.mark.anyio
async def test_a_long_subagent_keeps_its_latest_lines_under_its_call(tmp_path: Path) -> None:
    """Every refresh of a call redraws its subagent's lines: a long child keeps its latest 200
    there and says how many more its own page has."""
    require_chromium()
    from playwright.async_api import async_playwright

    child = [[{"text": f"line {n}"} for n in range(205)]]
    parent = [[spawn("talk a lot", "p1")], [{"text": "Heard it all."}]]
    async with (
        served(tmp_path, llm_factory=scripted(*parent, subagent=child), approval="allow-all") as s,
        async_playwright() as p,
    ):
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await browser.new_page()
            page.set_default_timeout(20_000)
            await page.goto(f"{s.base}/#token={TOKEN}")
            await page.wait_for_selector("table.sessions")
            sid = await s.new_session(subagents=True)
            await page.goto(f"{s.base}/#/s/{sid}")
            await page.fill(".composer textarea", "Delegate")
            await page.click("button.send")
            await page.wait_for_selector(".b-assistant >> text=Heard it all.")
            lines = await nested(page, "p1")
            assert lines == [f"line {n}" for n in range(5, 205)]
            head = await page.locator(f"{call('p1')} .nested > .muted").inner_text()
            assert "5 earlier lines on its own page" in head
        finally:
            await browser.close()
