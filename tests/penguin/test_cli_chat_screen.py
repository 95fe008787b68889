"""Issue 30 item 1: what ``penguin chat`` shows on a real terminal.

The chat runs on a pty rendered by a terminal emulator (``pyte``) that answers cursor-position
requests as every terminal does; the assertions read the rendered screen.  A streamed answer's
last line used to be written without its newline, the prompt was drawn on that row, and the
prompt's next redraw cleared it: ``You said: two`` became `` said: two`` or vanished.  The raw
bytes always held the answer, so only the screen shows the defect.  Ordering comes from what the
screen shows, never from sleeps."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from providerkit import Gate, Reply, SSEServer, sse
from ttykit import Terminal, spawn

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")

PENGUIN = Path(sys.executable).parent / "penguin"
LONG = (
    "Here is a longer answer of forty words so that it wraps across more than one row of the "
    "terminal: the quick brown fox jumps over the lazy dog while the penguin waddles past the "
    "river, counting stones until evening."
)
assert len(LONG.split()) == 40


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    body = {"id": "c1", "object": "chat.completion.chunk", "choices": choices, **extra}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def answer(
    text: list[str], *, thinking: list[str] | None = None, cmd: str | None = None
) -> tuple[Reply, Gate]:
    """An OpenAI-compatible streamed answer that stops after its last text delta until the
    test opens its gate: as a real server does between the last token and the end of the
    stream, and the moment the chat used to leave the line half-written."""
    gate = Gate()
    pieces: list[bytes | Gate] = [_chunk({"role": "assistant", "content": ""})]
    pieces += [_chunk({"reasoning_content": t}) for t in thinking or []]
    pieces += [_chunk({"content": t}) for t in text]
    pieces.append(gate)
    if cmd is not None:
        call = {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": "exec_command", "arguments": json.dumps({"cmd": cmd})},
        }
        pieces.append(_chunk({"tool_calls": [call]}))
    pieces.append(_chunk({}, "tool_calls" if cmd is not None else "stop"))
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    pieces += [_chunk(None, usage=usage), b"data: [DONE]\n\n"]
    return sse(pieces), gate


@pytest.fixture
def server() -> Iterator[SSEServer]:
    with SSEServer() as s:
        yield s


@pytest.fixture
def terminal(tmp_path: Path, server: SSEServer) -> Iterator[Any]:
    started: list[Terminal] = []

    def start(*args: str) -> Terminal:
        ws = tmp_path / "ws"
        ws.mkdir(exist_ok=True)
        home = tmp_path / f"home{len(started)}"
        argv = [str(PENGUIN), "--home", str(home), "--init", "chat", "--llm", "openai"]
        argv += ["--model", "m", "--base-url", server.url, "--workspace", str(ws), *args]
        term = spawn(argv, env={"OPENAI_API_KEY": "k"})
        started.append(term)
        return term

    yield start
    for term in started:
        term.close()


def _rows_with(term: Terminal, text: str) -> list[str]:
    return [line for line in term.lines() if text in line]


def test_answers_stay_on_screen_across_messages_thinking_tools_and_approvals(
    terminal: Any, server: SSEServer
) -> None:
    """R-CLI-1 (readable rendering), issue 30 item 1: after four messages — one with thinking,
    one with a tool call approved at the prompt, one 40-word answer — every answer is whole on
    the screen, each on its own rows, the prompt below them.  Each answer stops after its last
    delta (its line on screen, no newline yet) until the screen shows it."""
    replies = [
        answer(["You ", "said: ", "one"]),
        answer(["You ", "said: ", "two"], thinking=["Thinking ", "about two."]),
        answer(["Checking ", "three."], cmd="printf 'tool-%s' ran"),
        answer(["You ", "said: ", "three"]),
        answer([LONG[i : i + 23] for i in range(0, len(LONG), 23)]),
    ]
    server.queue(*(reply for reply, _gate in replies))
    gates = [gate for _reply, gate in replies]
    term = terminal("--approve", "ask")

    def held(n: int, shown: str) -> None:
        """The n-th answer has stopped mid-line with ``shown`` on the screen: let it end."""
        gates[n].reached.wait(30)
        term.wait_for(shown)
        gates[n].open()

    term.wait_for("/help for commands")
    term.type("one\r")
    held(0, "You said: one")
    term.wait_for("(1 turn(s);")
    term.type("two\r")
    held(1, "You said: two")
    term.wait_for("(2 turn(s);")
    term.type("three\r")
    held(2, "Checking three.")
    term.wait_for("y / n / a")  # the approval, inline
    term.type("y\r")
    held(3, "You said: three")
    term.wait_for("(4 turn(s);")
    term.type("four\r")
    held(4, "counting stones")
    term.wait_for("(5 turn(s);")
    term.type("/exit\r")
    assert term.finish() == 0, term.text
    assert term.cursor_requests > 0  # the emulator was asked, and answered

    screen = term.text
    for text in ("You said: one", "You said: two", "Checking three.", "You said: three"):
        rows = _rows_with(term, text)
        assert len(rows) == 1, f"{text!r} not whole on one row:\n{screen}"
        assert rows[0].strip() == text, f"{text!r} shares its row:\n{screen}"
    assert _rows_with(term, "Thinking about two.") != [], screen
    assert "tool-ran" in screen, screen
    # The 40-word answer wraps over rows: joined as cut, it is all there.
    assert LONG in "".join(term.lines(trim=False)), screen
    # In order, each after the message that asked for it.
    order = [
        screen.index("› one"),
        screen.index("You said: one"),
        screen.index("› two"),
        screen.index("You said: two"),
        screen.index("› three"),
        screen.index("Checking three."),
        screen.index("[approve] exec_command"),
        screen.index("You said: three"),
        screen.index("› four"),
        screen.index("Here is a longer answer"),
    ]
    assert order == sorted(order), screen


# --------------------------------------------------------------------------- item 3 (chat)

TOOLS = [{"name": "shell", "description": "Run a command (scripted)."}]


def _call(n: int) -> dict[str, Any]:
    result = {"output": f"out-{n}"}
    return {"tool_call": {"name": "shell", "arguments": {"cmd": f"ls {n}"}, "result": result}}


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[Any]:
    started: list[tuple[Terminal, Path]] = []

    def start(script: dict[str, Any], *args: str) -> tuple[Terminal, Path]:
        path = tmp_path / f"script{len(started)}.json"
        path.write_text(json.dumps(script))
        ws = tmp_path / "ws"
        ws.mkdir(exist_ok=True)
        home = tmp_path / f"home{len(started)}"
        argv = [str(PENGUIN), "--home", str(home), "--init", "chat", "--script", str(path)]
        term = spawn([*argv, "--workspace", str(ws), *args])
        started.append((term, home))
        return term, home

    yield start
    for term, _home in started:
        term.close()


def test_chat_approval_reasks_takes_one_key_and_exit_quits(scripted: Any) -> None:
    """Issue 30 item 3, R-APPROVE: an answer that is not y/n/a asks again (it used to deny
    silently); a single key press answers; ``/exit`` at an approval quits the chat, the call
    unrun and the trace valid."""
    script = {
        "tools": TOOLS,
        "responses": [
            [{"text": "First call."}, _call(1)],
            [{"text": "Second call."}, _call(2)],
            [{"text": "never reached"}],
        ],
    }
    term, home = scripted(script, "--approve", "ask")
    term.wait_for("/help for commands")
    term.type("go\r")
    term.wait_for("y / n / a")
    term.type("maybe later\r")
    term.wait_for("answer y (yes), n (no) or a")
    assert "out-1" not in term.text  # not run, not denied: still asking
    term.type("y")  # one key, no Enter
    term.wait_for("out-1")
    term.wait_for_count("y / n / a", 2)
    term.type("/exit\r")
    assert term.finish() == 0, term.text
    assert "out-2" not in term.text
    from eventstore import ApprovalDecisionPayload, DataRoot, read_trace
    from replay import validate_session

    (info,) = DataRoot(home).sessions()
    records = read_trace(info.files).records
    decisions = [
        r.payload.decision for r in records if isinstance(r.payload, ApprovalDecisionPayload)
    ]
    assert decisions == ["allow"]
    assert [f for f in validate_session(info.files) if f.severity == "error"] == []


# --------------------------------------------------------------------------- item 6 (recap)


def test_resuming_a_chat_shows_the_last_exchange_and_the_carry_over(tmp_path: Path) -> None:
    """R-CLI-2 / R-CARRY: ``penguin chat SESSION`` opens on where the conversation stands —
    the last exchange, and what an aborted turn carries over to the next message."""
    from clikit import SID, meta, trace_file, turn, write_records

    from eventstore import builders as b

    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    write_records(
        trace_file(home),
        [
            meta(),
            b.user_text("first task"),
            *turn("the first answer"),
            b.user_text("second task"),
            b.request_begin(),
            b.assistant_text("half an ans", stop_reason="aborted"),
            b.request_end("aborted"),
            b.abort("aborted by user"),
        ],
    )
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"model_id": "demo", "responses": [[{"text": "ok"}]]}))
    argv = [str(PENGUIN), "--home", str(home), "chat", SID, "--script", str(script)]
    term = spawn([*argv, "--workspace", str(ws)])
    try:
        term.wait_for("/help for commands")
        term.wait_for("carried over to your next message (1)")
        screen = term.text
        assert screen.index("› first task") < screen.index("the first answer")
        assert "resumed after 1 turn(s)" in screen
        assert "half an ans" in screen.split("carried over", 1)[1]
        term.type("/exit\r")
        assert term.finish() == 0, term.text
    finally:
        term.close()
