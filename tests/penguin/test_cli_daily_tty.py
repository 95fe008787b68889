"""Issue 30 items 3, 7 and 11: ``penguin run`` on a real terminal — approvals answered with one
key and asked again on any other answer, ``/exit`` at an approval, a line typed during a run
delivered as steering, and how to continue a goal after Ctrl-C.  The screen is rendered by a
terminal emulator (``ttykit``); ordering comes from the script and from what the screen shows."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ttykit import Terminal, spawn

from eventstore import (
    AbortPayload,
    ApprovalDecisionPayload,
    DataRoot,
    TextPayload,
    read_trace,
)
from projections import markers as mk
from replay import validate_session

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")

PENGUIN = Path(sys.executable).parent / "penguin"
TOOLS = [{"name": "shell", "description": "Run a command (scripted)."}]


def _call(n: int) -> dict[str, Any]:
    result = {"output": f"out-{n}"}
    return {"tool_call": {"name": "shell", "arguments": {"cmd": f"ls {n}"}, "result": result}}


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Any]:
    started: list[Terminal] = []

    def start(script: dict[str, Any], *args: str) -> tuple[Terminal, Path]:
        path = tmp_path / f"script{len(started)}.json"
        path.write_text(json.dumps(script))
        ws = tmp_path / "ws"
        ws.mkdir(exist_ok=True)
        home = tmp_path / f"home{len(started)}"
        argv = [str(PENGUIN), "--home", str(home), "--init", "run", "--script", str(path)]
        term = spawn([*argv, "--workspace", str(ws), *args])
        started.append(term)
        return term, home

    yield start
    for term in started:
        term.close()


def _records(home: Path) -> list[Any]:
    (info,) = DataRoot(home).sessions()
    assert [f for f in validate_session(info.files) if f.severity == "error"] == []
    return read_trace(info.files).records


def test_run_approval_takes_one_key_reasks_and_exit_ends_the_run(run: Any) -> None:
    """R-CLI-1 ``--approve ask``: a stray key or a sentence asks again (it used to deny
    silently); ``y`` alone answers; ``/exit`` ends the run (aborted, exit 1, the call unrun)."""
    script = {
        "tools": TOOLS,
        "responses": [
            [{"text": "First."}, _call(1)],
            [{"text": "Second."}, _call(2)],
            [{"text": "never reached"}],
        ],
    }
    term, home = run(script, "-m", "go", "--approve", "ask")
    term.wait_for("[a]ll from now on:")
    term.type("x")  # a stray key
    term.wait_for("answer y (yes), n (no) or a")
    assert "out-1" not in term.text
    term.type("y")  # one key, no Enter
    term.wait_for("out-1")
    term.wait_for_count("[a]ll from now on:", 3)  # the second call's question
    term.type("/exit\r")
    assert term.finish() == 1, term.text
    assert "out-2" not in term.text and "never reached" not in term.text
    records = _records(home)
    decisions = [
        r.payload.decision for r in records if isinstance(r.payload, ApprovalDecisionPayload)
    ]
    assert decisions == ["allow"]
    assert isinstance(records[-1].payload, AbortPayload)


def test_a_line_typed_during_a_run_steers_it(run: Any) -> None:
    """R-STEER: a line typed while ``penguin run`` works is delivered as steering (it used to
    be echoed and dropped), and the terminal says so."""
    script = {
        "tools": TOOLS,
        "responses": [
            # The pause is the script's: the line is typed while the turn is still open.
            [{"text": "Working."}, {"sleep_ms": 2000}, _call(1)],
            [{"text": "Done."}],
        ],
    }
    term, home = run(script, "-m", "go")
    term.wait_for("Working.")
    term.type("also check the docs\r")
    term.wait_for("[steer] sent to the running task")
    assert term.finish() == 0, term.text
    steering = [
        r.payload.text
        for r in _records(home)
        if isinstance(r.payload, TextPayload) and mk.is_steering(r.payload.text)
    ]
    assert len(steering) == 1 and "also check the docs" in steering[0]


def test_ctrl_c_in_a_goal_run_says_how_to_continue(run: Any) -> None:
    """R-GOAL-7/8: after Ctrl-C the goal is continuable, and the CLI names the command."""
    script = {"responses": [[{"text": "Round one."}, {"sleep_ms": 30000}]]}
    term, home = run(script, "--goal", "-m", "make it so")
    term.wait_for("Round one.")
    term.type(b"\x03")
    assert term.finish() == 1, term.text
    (info,) = DataRoot(home).sessions()
    assert f"penguin resume {info.session_id} --goal-continue" in term.text.replace("\n", "")
