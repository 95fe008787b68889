"""``penguin inspect --follow``: tail a live session's trace.

Owns: watching the directory of the session's latest file with watchfiles, reading what was
appended (``eventstore.tail``: complete lines only, a partial last line waits for its newline)
and moving to the next ``_NNN`` file when the session rotates.  Does not: take locks or write anything.
Ends on Ctrl-C (exit 0) or when ``stop`` is set.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

import anyio
from watchfiles import awatch

from eventstore import OmniMessage, TailRead, tail

from .tracefiles import trace_name

__all__ = ["Follower", "follow"]

# watchfiles wakes us on changes; this timeout makes us look anyway now and then, in case an
# event was missed (network file systems, inotify limits).
_RESCAN_MS: Final = 1000
_READ_BYTES: Final = 1 << 20


class Follower:
    """Reads a session's files from byte offsets (``eventstore.tail``); calls ``emit`` for each
    new record with its ``file:ordinal`` coordinate and line number."""

    def __init__(self, path: Path, emit: Callable[[int, int, int, OmniMessage], None]) -> None:
        self.path = path
        self._emit = emit
        name = trace_name(path)
        self._session = name[0] if name else None
        self.index = name[1] if name else 1
        self._width = len(path.name) - len(f"{self._session}_.jsonl") if name else 3
        self._read: TailRead | None = None

    def _next_path(self) -> Path | None:
        if self._session is None:
            return None
        width = max(3, self._width)
        return self.path.with_name(f"{self._session}_{self.index + 1:0{width}d}.jsonl")

    def poll(self) -> None:
        """Print what was appended since the last call, then follow any rotation."""
        self._drain()
        while True:
            nxt = self._next_path()
            if nxt is None or not nxt.exists():
                return
            self._drain()  # the old file is final once its successor exists
            if self._read is not None and self._read.unterminated:
                print(
                    f"[follow] {self.path.name}: its last line never ended (torn tail); skipped",
                    file=sys.stderr,
                    flush=True,
                )
            self.path = nxt
            self.index += 1
            self._read = None
            self._drain()

    def _drain(self) -> None:
        try:
            read = tail(self.path) if self._read is None else self._read.more()
        except FileNotFoundError:
            return
        self._read = read
        for d in read.diagnostics:
            print(
                f"[follow] {self.path.name}:{d.line}: malformed line skipped",
                file=sys.stderr,
                flush=True,
            )
        for t in read.records:
            self._emit(self.index, t.ordinal, t.line, t.record)


async def follow(
    path: Path,
    emit: Callable[[int, int, int, OmniMessage], None],
    *,
    stop: anyio.Event | None = None,
) -> None:
    """Emit every record of ``path`` and of the files it rotates to, until Ctrl-C or ``stop``."""
    stop = stop or anyio.Event()
    follower = Follower(path, emit)
    async with anyio.create_task_group() as tg:

        async def on_interrupt(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                task_status.started()
                async for _ in signals:
                    stop.set()
                    return

        # Ctrl-C is handled before the first record is printed: whoever saw output can stop us.
        await tg.start(on_interrupt)
        follower.poll()
        async for _changes in awatch(
            path.parent,
            stop_event=stop,
            rust_timeout=_RESCAN_MS,
            yield_on_timeout=True,
            recursive=False,
            debounce=200,
            step=20,
        ):
            follower.poll()
        tg.cancel_scope.cancel()
