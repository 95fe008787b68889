"""``penguin run`` on a real terminal (a pty whose ^C the line discipline turns into SIGINT):
``--approve ask`` answered at the prompt, Ctrl-C while a tool runs and while a prompt waits
(R-CLI-1: the run ends with its abort, exit 1, the trace stays valid), the live retry countdown,
and NO_COLOR."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from eventstore import AbortPayload, ApprovalDecisionPayload, DataRoot, read_trace
from replay._validate import validate_session

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")

PENGUIN = Path(sys.executable).parent / "penguin"
MARK = b"tool-running"  # printed by the tool, never part of its arguments
LONG_TOOL = {
    "responses": [
        [
            {"text": "Running it."},
            {
                "tool_call": {
                    "name": "exec_command",
                    "arguments": {"cmd": "printf 'tool-%s\\n' running; sleep 30"},
                }
            },
        ],
        [{"text": "Done."}],
    ]
}
SHORT_TOOL = {
    "responses": [
        [
            {"text": "Running it."},
            {
                "tool_call": {
                    "name": "exec_command",
                    "arguments": {"cmd": "printf 'tool-%s\\n' running"},
                }
            },
        ],
        [{"text": "Done."}],
    ]
}
RETRY = {
    "responses": [
        [{"text": "half"}, {"fail": {"status": "timeout", "message": "idle timeout"}}],
        [{"text": "whole"}],
    ]
}


@dataclass
class Terminal:
    proc: subprocess.Popen[bytes]
    fd: int
    home: Path
    seen: bytes = b""

    def read_until(self, token: bytes, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while token not in self.seen:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.fd], [], [], max(0.0, left))
            if not ready:
                raise AssertionError(f"timed out waiting for {token!r}; screen: {self.seen!r}")
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                chunk = b""
            if not chunk:
                raise AssertionError(f"terminal closed before {token!r}; screen: {self.seen!r}")
            self.seen += chunk

    def finish(self, timeout: float = 20) -> int:
        """Drain the terminal until the process exits; return its exit code."""
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
                    continue
            code = self.proc.poll()
            if code is not None:
                return code
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"still running; screen: {self.seen!r}")

    def records(self) -> list[Any]:
        root = DataRoot(self.home)
        (info,) = root.sessions()
        return read_trace(info.files).records

    def files(self) -> list[Path]:
        (info,) = DataRoot(self.home).sessions()
        return info.files


def _controlling_tty() -> None:
    # Runs in the child after setsid(): make the pty (fd 0) its controlling terminal, so that
    # ^C typed on it becomes SIGINT for the child's process group.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@pytest.fixture
def terminals(tmp_path: Path) -> Any:
    started: list[Terminal] = []

    def start(script: dict[str, Any], *args: str, env: dict[str, str] | None = None) -> Terminal:
        path = tmp_path / f"script{len(started)}.json"
        path.write_text(json.dumps(script))
        ws = tmp_path / "ws"
        ws.mkdir(exist_ok=True)
        home = tmp_path / f"home{len(started)}"
        base = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PENGUIN_HOME", "NO_COLOR", "FORCE_COLOR")
        }
        base.update(TERM="xterm-256color", COLUMNS="120")
        base.update(env or {})
        master, slave = pty.openpty()
        proc = subprocess.Popen(
            [
                str(PENGUIN),
                "--home",
                str(home),
                "--init",
                "run",
                "-m",
                "go",
                "--script",
                str(path),
                "--workspace",
                str(ws),
                *args,
            ],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=base,
            start_new_session=True,
            preexec_fn=_controlling_tty,
        )
        os.close(slave)
        term = Terminal(proc, master, home)
        started.append(term)
        return term

    yield start
    for term in started:
        if term.proc.poll() is None:
            term.proc.kill()
            term.proc.wait()
        os.close(term.fd)


def _assert_ended_by_abort(term: Terminal) -> None:
    records = term.records()
    assert isinstance(records[-1].payload, AbortPayload)
    assert [f for f in validate_session(term.files()) if f.severity == "error"] == []


def test_approve_ask_prompt_answered_yes_on_a_tty(terminals: Any) -> None:
    term = terminals(SHORT_TOOL, "--approve", "ask")
    term.read_until(b"[a]ll from now on: ")
    # The prompt comes after what the model wrote before the call.
    assert term.seen.index(b"Running it.") < term.seen.index(b"[approve] exec_command")
    os.write(term.fd, b"y\r")
    assert term.finish() == 0, term.seen
    assert MARK in term.seen and b"Done." in term.seen
    decisions = [
        r.payload.decision for r in term.records() if isinstance(r.payload, ApprovalDecisionPayload)
    ]
    assert decisions == ["allow"]


def test_ctrl_c_while_a_tool_runs_aborts_the_run_cleanly(terminals: Any) -> None:
    term = terminals(LONG_TOOL)
    term.read_until(MARK)  # the tool is running (it printed), and will sleep for 30 s
    sent = time.monotonic()
    os.write(term.fd, b"\x03")
    assert term.finish(timeout=15) == 1, term.seen
    assert time.monotonic() - sent < 10  # promptly, not after the tool's 30 s
    assert b"[interrupt] aborting the run" in term.seen
    assert b"[abort] aborted by user" in term.seen and b"session: " in term.seen
    _assert_ended_by_abort(term)


def test_ctrl_c_at_the_approval_prompt_aborts_without_a_decision(terminals: Any) -> None:
    term = terminals(LONG_TOOL, "--approve", "ask")
    term.read_until(b"[a]ll from now on: ")
    os.write(term.fd, b"\x03")
    assert term.finish(timeout=15) == 1, term.seen
    _assert_ended_by_abort(term)
    assert not any(isinstance(r.payload, ApprovalDecisionPayload) for r in term.records())


def test_retry_countdown_is_shown_on_a_terminal(terminals: Any) -> None:
    term = terminals(RETRY)
    assert term.finish() == 0, term.seen
    assert b"[retry] attempt 1, next in 250 ms" in term.seen
    assert b"next attempt in" in term.seen  # the live countdown under the [retry] line
    assert term.seen.index(b"next attempt in") < term.seen.index(b"whole")


def _colours(screen: bytes) -> set[int]:
    """SGR colour parameters used on ``screen`` (30–38, 40–48, 90–97, 100–107)."""
    found: set[int] = set()
    for params in re.findall(rb"\x1b\[([0-9;]*)m", screen):
        for p in params.split(b";"):
            if p.isdigit() and (30 <= int(p) <= 48 or 90 <= int(p) <= 107):
                found.add(int(p))
    return found


def test_no_color_is_honoured(terminals: Any) -> None:
    """https://no-color.org: no colour with NO_COLOR (bold and dim may stay)."""
    coloured = terminals(SHORT_TOOL)
    plain = terminals(SHORT_TOOL, env={"NO_COLOR": "1"})
    assert coloured.finish() == 0 and plain.finish() == 0
    assert 36 in _colours(coloured.seen)  # the cyan [tool] line on a terminal…
    assert _colours(plain.seen) == set()  # …and no colour at all with NO_COLOR
    assert MARK in plain.seen and b"Done." in plain.seen
