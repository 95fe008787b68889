"""What the person at the terminal types while ``penguin run`` works (issue 30 items 3 and 7).

Owns: reading stdin on a daemon thread (an abandoned read — Ctrl-C, the run's end — neither
blocks the event loop nor keeps the process alive), handing the loop whole lines (a line typed
during a run steers it) or single key presses (an approval answered with one key: the terminal
is switched to non-canonical mode without echo for the question, and back after), and putting
the terminal's modes back however the run ends.  Does not: decide what a line or key means
(``tasks.live``).
"""

from __future__ import annotations

import codecs
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel

from engine import AbortSignal

__all__ = ["Keyboard", "restore_terminal"]

_saved: list[tuple[int, list[Any]]] = []  # terminal modes to put back at exit, however abrupt


def restore_terminal() -> None:
    """Put back every terminal mode a ``Keyboard`` changed (also before ``os._exit``)."""
    import termios

    while _saved:
        fd, attrs = _saved.pop()
        try:
            termios.tcsetattr(fd, termios.TCSANOW, attrs)
        except (OSError, termios.error):
            continue


class Keyboard:
    """stdin as lines and keys.  ``tty``: stdin is a terminal (keys can be read one by one)."""

    def __init__(self) -> None:
        self.tty = sys.stdin.isatty()
        self._fd = sys.stdin.fileno() if self.tty else 0
        self._text = ""
        self._eof = False
        self._changed = anyio.Event()
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._started = False
        self.asking = False  # an approval owns the input: lines are not steering now

    # ------------------------------------------------------------------ the reader thread

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        token = anyio.lowlevel.current_token()
        fd, stdin, tty = self._fd, sys.stdin, self.tty

        def read() -> bytes:
            # A terminal's keys as they come (one by one in single-key mode); anything else
            # (a pipe, a test's stdin) line by line through its file object.
            if tty:
                return os.read(fd, 4096)
            return stdin.readline().encode("utf-8", "surrogateescape")

        def work() -> None:
            while True:
                try:
                    data = read()
                except (OSError, ValueError):
                    data = b""
                try:
                    anyio.from_thread.run_sync(self._feed, data, token=token)
                except RuntimeError:  # the event loop has ended: nobody listens any more
                    return
                if not data:
                    return

        threading.Thread(target=work, name="penguin-keyboard", daemon=True).start()

    def _feed(self, data: bytes) -> None:
        self._text += self._decoder.decode(data, final=not data)
        self._eof = self._eof or not data
        self._changed.set()
        self._changed = anyio.Event()

    async def _wait(self, cancel: AbortSignal) -> bool:
        """Until more input (True) or ``cancel`` fires (False)."""
        changed = self._changed
        got = False
        async with anyio.create_task_group() as tg:

            async def on_cancel() -> None:
                await cancel.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(on_cancel)
            await changed.wait()
            got = True
            tg.cancel_scope.cancel()
        return got

    # ------------------------------------------------------------------ reading

    async def line(self, cancel: AbortSignal, *, steering: bool = False) -> str | None:
        """The next whole line (without its newline); what is left at end of input; None at
        end of input or when ``cancel`` fires.  A ``steering`` reader waits while an approval
        owns the input."""
        self.start()
        while True:
            if not (steering and self.asking):
                cut = self._text.find("\n")
                if cut >= 0:
                    line, self._text = self._text[:cut], self._text[cut + 1 :]
                    return line.removesuffix("\r")
                if self._eof:
                    rest, self._text = self._text, ""
                    return rest or None
            if not await self._wait(cancel):
                return None

    async def key(self, cancel: AbortSignal) -> str | None:
        """The next key (one character); None at end of input or when ``cancel`` fires."""
        self.start()
        while not self._text:
            if self._eof or not await self._wait(cancel):
                return None
        key, self._text = self._text[0], self._text[1:]
        return key

    def pending_lines(self) -> list[str]:
        """Whole lines typed and not yet read (handed on before an approval takes the input)."""
        *lines, self._text = self._text.split("\n")
        return [line.removesuffix("\r") for line in lines]

    @contextmanager
    def single_keys(self) -> Iterator[None]:
        """Keys arrive one by one, unechoed (a terminal's non-canonical mode); a half-typed line
        is discarded first, so that it cannot answer the question."""
        if not self.tty:
            yield
            return
        import termios

        fd = self._fd
        saved = termios.tcgetattr(fd)
        mode = termios.tcgetattr(fd)
        mode[3] &= ~(termios.ICANON | termios.ECHO)
        mode[6][termios.VMIN] = 1
        mode[6][termios.VTIME] = 0
        _saved.append((fd, saved))
        termios.tcflush(fd, termios.TCIFLUSH)
        termios.tcsetattr(fd, termios.TCSANOW, mode)
        try:
            yield
        finally:
            termios.tcsetattr(fd, termios.TCSANOW, saved)
            if (fd, saved) in _saved:
                _saved.remove((fd, saved))
