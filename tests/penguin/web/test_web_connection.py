"""The Web App while a server goes away and while text streams (issue 35; R-WEB-2/3, R-SRV-6/8,
R-STEER-3/7/8, R-CARRY-1): Markdown renders as it arrives, a steering message shows as queued
until delivered (or as not delivered when the task ended first), Stop gives one notice, and when
the real ``penguin serve`` process is killed mid-answer the page says "connection lost —
reconnecting", recovers by itself once the server is back on its port, and keeps the half-streamed
answer the trace did not keep, marked interrupted.

The model is a real OpenAI-compatible HTTP stream (providerkit) that stops mid-answer at a
``Gate`` until the test opens it: no sleeps."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from providerkit import Gate, SSEServer, sse
from webkit import Server, penguin_serve, shot, watch

KEY_ENV = "PENGUIN_WEB_TEST_KEY"
WAIT_S = 30


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-web",
        "object": "chat.completion.chunk",
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _answer(*parts: str | Gate) -> Any:
    """One streamed reply: text deltas (a Gate holds the stream there), then its end."""
    pieces: list[bytes | Gate] = [_chunk({"role": "assistant", "content": ""})]
    pieces += [p if isinstance(p, Gate) else _chunk({"content": p}) for p in parts]
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    end = {"id": "chatcmpl-web", "object": "chat.completion.chunk", "choices": [], "usage": usage}
    pieces += [
        _chunk({}, "stop"),
        b"data: " + json.dumps(end).encode() + b"\n\n",
        b"data: [DONE]\n\n",
    ]
    return sse(pieces)


def _serve(tmp: Path, llm: SSEServer, *, port: int = 0) -> Any:
    args = ("--llm", "openai", "--model", "gpt-4o", "--base-url", f"{llm.url}/v1")
    args += ("--api-key-env", KEY_ENV)
    return penguin_serve(
        tmp, None, approve="allow-all", port=port, args=args, env={KEY_ENV: "k-web-test"}
    )


@pytest.fixture(scope="module")
def llm() -> Iterator[SSEServer]:
    with SSEServer() as server:
        yield server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, llm: SSEServer) -> Iterator[Server]:
    with _serve(tmp_path_factory.mktemp("web-conn"), llm) as s:
        yield s


def _open_gates(gates: Sequence[Gate]) -> None:
    for gate in gates:
        gate.open()


def _start(page: Any, server: Server, text: str) -> str:
    sid: str = server.api("POST", "/api/sessions", {"approval": "allow-all"})["id"]
    page.goto(f"{server.base}/#/s/{sid}")
    page.wait_for_selector(".tag.state[data-state=idle]")
    page.fill(".composer textarea", text)
    page.keyboard.press("Enter")
    return sid


def test_streaming_markdown_and_a_delivered_steering_message(
    page: Any, server: Server, llm: SSEServer
) -> None:
    gate = Gate()
    llm.queue(
        _answer(
            "## Fil",
            "es\n\nThere are **tw",
            "o",
            gate,
            "** files.\n\n| a | b |\n|---|---|\n| 1 | 2 |",
        ),
        _answer("Counted: two."),  # the continuation turn that delivers the steering (R-STEER-7)
    )
    try:
        _start(page, server, "Which files?")
        assert gate.reached.wait(WAIT_S)
        live = page.locator(".b-assistant.streaming .body")
        live.locator("h4").wait_for()  # "## Files": a heading while it streams, no raw "##"
        assert live.locator("h4").inner_text() == "Files"
        assert live.locator("strong").inner_text() == "two"  # the open bold run shown closed
        assert "#" not in live.inner_text() and "*" not in live.inner_text()
        assert page.locator(".tag.state").inner_text() == "running"
        assert "steering message" in page.locator("#composer-hint").inner_text()

        page.fill(".composer textarea", "Also count them")
        page.keyboard.press("Enter")  # while a task runs, Enter steers
        queued = page.locator(".b-user:has(.tag.queued)")
        queued.wait_for()
        assert "Also count them" in queued.inner_text()
        shot(page, "web-streaming-markdown")
    finally:
        gate.open()
    page.wait_for_selector(".b-assistant:not(.streaming) table")
    page.wait_for_selector(".b-assistant >> text=Counted: two.")
    page.wait_for_selector(".tag.state[data-state=idle]")
    # Delivered: the queued copy gave way to the recorded steering message, shown once.
    assert page.locator(".tag.queued").count() == 0
    assert page.locator(".b-user:has(.tag.steer)").count() == 1
    assert page.locator(".tag.dropped").count() == 0


def test_stop_gives_one_notice_and_undelivered_steering_says_so(
    page: Any, server: Server, llm: SSEServer
) -> None:
    gate = Gate()
    llm.queue(_answer("Working on ", gate, "it."))
    try:
        _start(page, server, "Do it")
        assert gate.reached.wait(WAIT_S)
        page.locator(".b-assistant.streaming >> text=Working on").wait_for()
        page.fill(".composer textarea", "and hurry")
        page.click("button.steer")
        page.locator(".tag.queued").wait_for()
        page.click("button.stop")
        page.wait_for_selector(".tag.state[data-state=idle]")
    finally:
        gate.open()
    page.wait_for_selector(".notice.abort")
    notices = page.locator(".notice").all_inner_texts()
    assert len([n for n in notices if "bort" in n]) == 1, notices  # not "Request ended" too
    assert page.locator(".error:visible").count() == 0
    dropped = page.locator(".b-user:has(.tag.dropped)")
    dropped.wait_for()
    assert "and hurry" in dropped.inner_text()
    assert page.locator(".tag.queued").count() == 0


def test_server_killed_mid_answer_the_page_reconnects_and_marks_it_interrupted(
    browser: Any, llm: SSEServer, tmp_path: Path
) -> None:
    gate = Gate()
    llm.queue(_answer("Half of ", "the **answer**", gate, " and the rest."))
    with ExitStack() as stack:
        stack.callback(gate.open)
        first = stack.enter_context(_serve(tmp_path, llm))
        port = int(first.base.rsplit(":", 1)[1])
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        stack.callback(context.close)
        page = context.new_page()
        page.set_default_timeout(WAIT_S * 1000)
        watched = watch(page)
        page.goto(first.login_url)
        page.wait_for_selector("table.sessions")
        _start(page, first, "Explain")
        assert gate.reached.wait(WAIT_S)
        page.locator(".b-assistant.streaming >> text=Half of the answer").wait_for()
        assert page.locator("#conn").inner_text() == ""

        first.process.kill()  # no goodbye: the answer was never recorded
        first.process.wait(timeout=WAIT_S)
        page.wait_for_selector("#conn >> text=Connection lost — reconnecting")
        state = page.locator(".tag.state")
        page.wait_for_selector(".tag.state[data-state=offline]")
        assert state.inner_text() == "connection lost"  # not "running" any more
        assert page.locator("button.stop").is_disabled()
        assert page.locator(".transcript.offline").count() == 1  # the cursor stops blinking
        shot(page, "web-connection-lost")

        # Back on the same port with the same home: the page recovers by itself.
        stack.enter_context(_serve(tmp_path, llm, port=port))
        page.wait_for_selector(".tag.state[data-state=idle]")
        page.wait_for_function("() => document.getElementById('conn').textContent === ''")
        kept = page.locator(".b-assistant.interrupted")
        kept.wait_for()
        assert "Half of the answer" in kept.inner_text()
        assert kept.locator(".tag.interrupted").inner_text() == "interrupted"
        assert page.locator(".b-assistant.streaming").count() == 0
        shot(page, "web-connection-recovered")
        # The cut stream and the refused fetches while the server was down are the browser's
        # own console lines, not the page's errors.
        network = ("ERR_CONNECTION_REFUSED", "ERR_INCOMPLETE_CHUNKED_ENCODING")
        watched.errors = [e for e in watched.errors if not any(n in e for n in network)]
        watched.check()
