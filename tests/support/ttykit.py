"""A terminal for CLI tests: a pty whose output is rendered by the ``pyte`` terminal emulator.

A test reads what a person would see (``screen.display``), not the raw bytes: a line the
program wrote and then erased with a redraw is gone here too.  Like every terminal emulator,
this one answers the cursor-position request (``ESC[6n`` → ``ESC[row;colR``) with the real
cursor position, at the point of the stream where the request was made; prompt_toolkit lays
out its prompt from those answers.

Ordering comes from waiting for what the screen shows (``wait_for``), never from sleeps; the
timeouts only turn a hang into a failure.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import termios
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyte

__all__ = ["Terminal", "spawn"]

ROWS = 60
COLUMNS = 100


class _AnsweringScreen(pyte.HistoryScreen):  # type: ignore[misc]
    """A screen that keeps scrolled-off lines and collects what it answers to the program."""

    def __init__(self, columns: int, lines: int) -> None:
        super().__init__(columns, lines, history=2000)
        self.answers: list[str] = []

    def write_process_input(self, data: str) -> None:
        self.answers.append(data)


class Terminal:
    """A process on a pty, rendered by pyte."""

    def __init__(self, proc: subprocess.Popen[bytes], fd: int, rows: int, columns: int) -> None:
        self.proc = proc
        self.fd = fd
        self.screen = _AnsweringScreen(columns, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = b""
        self.cursor_requests = 0

    # ------------------------------------------------------------------ reading

    def _feed(self, chunk: bytes) -> None:
        self.raw += chunk
        before = len(self.screen.answers)
        # Fed whole: pyte answers a request with the cursor where the request came.
        self.stream.feed(chunk)
        for answer in self.screen.answers[before:]:
            if answer.endswith("R"):
                self.cursor_requests += 1
            os.write(self.fd, answer.encode())

    def _read(self, deadline: float) -> bool:
        """Read what is there (waiting until ``deadline``); False when the terminal closed."""
        left = deadline - time.monotonic()
        ready, _, _ = select.select([self.fd], [], [], max(0.0, left))
        if not ready:
            return True
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            chunk = b""
        if not chunk:
            return False
        self._feed(chunk)
        return True

    def lines(self, *, trim: bool = True) -> list[str]:
        """Every line a person can see or scroll back to (right-trimmed unless ``trim`` is
        False: a row of a wrapped line then joins the next one as it was cut)."""
        history = [
            "".join(line[x].data for x in range(self.screen.columns))
            for line in self.screen.history.top
        ]
        rows = history + list(self.screen.display)
        return [row.rstrip() for row in rows] if trim else rows

    @property
    def text(self) -> str:
        return "\n".join(self.lines())

    def wait_until(
        self, predicate: Callable[[Terminal], bool], what: str, *, timeout: float = 30
    ) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; screen:\n{self.text}")
            if not self._read(deadline) and not predicate(self):
                raise AssertionError(f"terminal closed before {what}; screen:\n{self.text}")

    def wait_for(self, token: str, *, timeout: float = 30) -> None:
        """Until ``token`` is on the screen."""
        self.wait_until(lambda t: token in t.text, repr(token), timeout=timeout)

    def wait_for_count(self, token: str, count: int, *, timeout: float = 30) -> None:
        self.wait_until(
            lambda t: t.text.count(token) >= count, f"{count} x {token!r}", timeout=timeout
        )

    def type(self, keys: str | bytes) -> None:
        os.write(self.fd, keys.encode() if isinstance(keys, str) else keys)

    def finish(self, timeout: float = 30) -> int:
        """Drain until the process exits; its exit code."""
        deadline = time.monotonic() + timeout
        while True:
            code = self.proc.poll()
            if not self._read(min(deadline, time.monotonic() + 0.05)):
                code = self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            if code is not None:
                while self._read(time.monotonic()) and self._pending():
                    pass
                return code
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"still running; screen:\n{self.text}")

    def _pending(self) -> bool:
        ready, _, _ = select.select([self.fd], [], [], 0)
        return bool(ready)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.fd)


def _controlling_tty() -> None:
    # In the child after setsid(): the pty becomes its controlling terminal, so that ^C typed
    # on it is SIGINT for the child's process group, as on a real terminal.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def spawn(
    argv: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    rows: int = ROWS,
    columns: int = COLUMNS,
    cwd: Path | None = None,
) -> Terminal:
    """Start ``argv`` on a new pty of ``rows`` x ``columns`` (stdin, stdout and stderr)."""
    base: dict[str, Any] = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PENGUIN_HOME", "NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES")
    }
    base.update(TERM="xterm-256color")
    base.update(env or {})
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    proc = subprocess.Popen(
        list(argv),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=base,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=_controlling_tty,
    )
    os.close(slave)
    return Terminal(proc, master, rows, columns)
