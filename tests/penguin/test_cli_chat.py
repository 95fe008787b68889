"""Issue 15 item 14: the interactive chat, driven through a real pty.

``penguin chat`` (and ``penguin`` with no command) streams answers, asks approvals inline,
lets a line typed during a task steer it, aborts on Ctrl-C (twice at an idle prompt quits),
and runs the slash commands.  Ordering comes from the script (``sleep_ms``) and from waiting
for what the screen shows, never from sleeps in the test."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from eventstore import AbortPayload, DataRoot, read_trace
from replay._validate import validate_session

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")

PENGUIN = Path(sys.executable).parent / "penguin"
SHIPPED_GOAL = Path(__file__).resolve().parents[2] / "fixtures" / "goal_script.json"
ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")
TOOLS = [{"name": "shell", "description": "Run a command (scripted)."}]
# What the chat's status bar shows while its prompt listens.
STATUS_BAR = ("/help for commands", "type to steer", "working…", "y = yes", "next attempt in")
SHELL = {"tool_call": {"name": "shell", "arguments": {"cmd": "ls"}, "result": {"output": "a.txt"}}}


@dataclass
class Screen:
    proc: subprocess.Popen[bytes]
    fd: int
    home: Path
    seen: bytes = b""
    typed_at: int = 0

    @property
    def text(self) -> str:
        return ANSI.sub(b"", self.seen).decode("utf-8", "replace")

    def mark(self) -> int:
        return len(self.text)

    def wait_for(self, token: str, timeout: float = 30, *, after: int = 0) -> None:
        """Until ``token`` is on the screen (past position ``after``)."""
        deadline = time.monotonic() + timeout
        while token not in self.text[after:]:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.fd], [], [], max(0.0, left))
            if not ready:
                raise AssertionError(f"timed out waiting for {token!r}; screen: {self.text!r}")
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                raise AssertionError(f"closed before {token!r}; screen: {self.text!r}")
            self._answer_cursor_requests(chunk)
            self.seen += chunk

    def _answer_cursor_requests(self, chunk: bytes) -> None:
        # prompt_toolkit asks where the cursor is (CPR) to lay out its status bar; a terminal
        # answers, and so does this one.
        for _ in range(chunk.count(b"\x1b[6n")):
            os.write(self.fd, b"\x1b[1;1R")

    def type(self, keys: str) -> None:
        """Type once the prompt is listening: its status bar has been drawn since the last
        keys were typed (keys typed while it restarts after Enter could be dropped)."""
        deadline = time.monotonic() + 30
        while not any(s in self.text[self.typed_at :] for s in STATUS_BAR):
            self._read_some(deadline)
        self.typed_at = len(self.text)
        os.write(self.fd, keys.encode())

    def _read_some(self, deadline: float) -> None:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([self.fd], [], [], max(0.0, left))
        if not ready:
            raise AssertionError(f"the prompt never came back; screen: {self.text!r}")
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            raise AssertionError(f"closed; screen: {self.text!r}")
        self._answer_cursor_requests(chunk)
        self.seen += chunk

    def finish(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while True:
            ready, _, _ = select.select([self.fd], [], [], 0.05)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    chunk = b""
                self.seen += chunk
                if chunk:
                    self._answer_cursor_requests(chunk)
                    continue
            code = self.proc.poll()
            if code is not None:
                return code
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"still running; screen: {self.text!r}")

    def records(self) -> list[Any]:
        (info,) = DataRoot(self.home).sessions()
        return read_trace(info.files).records


@pytest.fixture
def chat(tmp_path: Path) -> Any:
    started: list[Screen] = []

    def start(script: dict[str, Any] | Path | None, *args: str, command: str = "chat") -> Screen:
        home = tmp_path / f"home{len(started)}"
        ws = tmp_path / "ws"
        ws.mkdir(exist_ok=True)
        argv = [str(PENGUIN), "--home", str(home), "--init"]
        if command:
            argv.append(command)
        if script is not None:
            path = script if isinstance(script, Path) else tmp_path / f"s{len(started)}.json"
            if not isinstance(script, Path):
                path.write_text(json.dumps(script))
            argv += ["--script", str(path)]
        if command:
            argv += ["--workspace", str(ws), *args]
        env = {k: v for k, v in os.environ.items() if k not in ("PENGUIN_HOME", "NO_COLOR")}
        env.update(TERM="xterm-256color", COLUMNS="100", LINES="40")
        master, slave = pty.openpty()
        # A real terminal has a size: the status bar is drawn on its last row.
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
        proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
        )
        os.close(slave)
        screen = Screen(proc, master, home)
        started.append(screen)
        return screen

    yield start
    for screen in started:
        if screen.proc.poll() is None:
            screen.proc.kill()
            screen.proc.wait()
        os.close(screen.fd)


def test_chat_streams_asks_inline_and_runs_slash_commands(chat: Any) -> None:
    script = {
        "tools": TOOLS,
        "responses": [
            [{"text": "Let me look."}, SHELL],
            [{"text": "Found a.txt."}],
            [{"text": "Listing files"}],  # the /title request
            [{"text": "[summary]The user listed files.[/summary]"}],  # the /compact request
        ],
    }
    screen = chat(script, "--approve", "ask")
    screen.wait_for("/help")
    screen.type("what is here?\r")
    screen.wait_for("y / n / a")  # the approval, inline
    screen.type("y\r")
    screen.wait_for("Found a.txt.")
    screen.wait_for("(2 turn(s)")
    screen.type("/title\r")
    screen.wait_for("title: Listing files")
    screen.type("/sessions\r")
    (info,) = DataRoot(screen.home).sessions()
    screen.wait_for(info.session_id[-8:] + "  ")
    screen.type("/fork\r")
    screen.wait_for("forked: ")  # the chat goes on in the fork
    screen.wait_for("penguin chat — scripted/script, session", timeout=30)
    screen.type("/compact\r")
    screen.wait_for("[compact] completed")
    screen.type("/help\r")
    screen.wait_for("/goal[:budget] OBJECTIVE")
    screen.type("/nope\r")
    screen.wait_for("unknown command /nope")
    screen.type("/exit\r")
    assert screen.finish() == 0
    sessions = DataRoot(screen.home).sessions()
    assert len(sessions) == 2  # the chat's and the fork (which was compacted)
    records = read_trace(DataRoot(screen.home).trace_files(info.session_id)).records
    decisions = [r.payload.decision for r in records if hasattr(r.payload, "decision")]
    assert decisions == ["allow"]
    assert [f for f in validate_session(info.files) if f.severity == "error"] == []
    assert (screen.home / ".cache" / "chat_history").read_text().count("what is here?") == 1


def test_typing_during_a_task_steers_it(chat: Any) -> None:
    script = {
        "responses": [
            [{"text": "Working on it."}, {"sleep_ms": 60000}, {"text": "late"}],
            [{"text": "Turned left as asked."}],
        ]
    }
    screen = chat(script)
    screen.wait_for("/help")
    screen.type("go\r")
    screen.wait_for("Working on it.")
    screen.wait_for("type to steer")  # the status bar while the task runs
    screen.type("turn left\r")
    screen.wait_for("[steer] sent to the running task")
    at = screen.mark()
    screen.wait_for("type to steer", after=at)  # the prompt is back: keys reach it
    screen.type("\x03")  # abort the sleeping turn; the steering is carried over
    screen.wait_for("[interrupt] aborting the task")
    screen.wait_for("turn(s); session tokens")
    screen.type("/exit\r")
    assert screen.finish() == 0
    # The engine took the line as steering (Session.steer accepted it); when it is delivered
    # is the engine's business (tests/engine/test_steering.py).
    assert any(isinstance(r.payload, AbortPayload) for r in screen.records())


def test_ctrl_c_aborts_the_task_and_twice_quits(chat: Any) -> None:
    script = {"responses": [[{"sleep_ms": 60000}, {"text": "x"}]]}
    screen = chat(script)
    screen.wait_for("/help")
    screen.type("think\r")
    screen.wait_for("working…")  # the spinner, with the elapsed time, before the first token
    screen.wait_for(" s  (Ctrl-C aborts)")
    screen.type("\x03")
    screen.wait_for("[interrupt] aborting the task")
    screen.wait_for("turn(s)")
    assert any(isinstance(r.payload, AbortPayload) for r in screen.records())
    at = screen.mark()
    screen.wait_for("/help for commands", after=at)
    screen.type("\x03")
    screen.wait_for("Ctrl-C again")
    at = screen.mark()
    screen.wait_for("/help for commands", after=at)
    screen.type("\x03")
    assert screen.finish() == 0


def test_goal_command_runs_rounds(chat: Any) -> None:
    screen = chat(SHIPPED_GOAL)
    screen.wait_for("/help")
    screen.type("/goal:500k make all tests pass\r")
    screen.wait_for("[goal] round 1")
    screen.wait_for("[goal] complete")
    screen.type("/exit\r")
    assert screen.finish() == 0


def test_penguin_without_a_command_opens_the_chat(chat: Any, tmp_path: Path) -> None:
    """With the configured model (a local OpenAI-compatible server needs no key)."""
    home = tmp_path / "home0"
    home.mkdir()
    (home / "config.toml").write_text(
        '[defaults]\nprovider = "openai"\nmodel = "m"\nbase_url = "http://127.0.0.1:9"\n'
    )
    screen = chat(None, command="")
    screen.wait_for("penguin chat — openai/m")
    screen.wait_for("/help for commands")  # the idle prompt's status bar
    screen.type("\x04")  # Ctrl-D
    assert screen.finish() == 0


def test_the_header_shows_the_sandbox(chat: Any) -> None:
    """SPEC R-BOX-3: the mode is in the chat's header, and `off` stands out."""
    script = {"tools": TOOLS, "responses": [[{"text": "hi"}]]}
    screen = chat(script)
    screen.wait_for("sandbox workspace-write, network off")
    screen.wait_for("/help for commands")
    screen.type("\x04")
    assert screen.finish() == 0
    screen = chat(script, "--sandbox", "off")
    screen.wait_for("sandbox OFF: tools run unconfined")
    screen.wait_for("/help for commands")
    screen.type("\x04")
    assert screen.finish() == 0
