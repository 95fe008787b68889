"""What one run of a session carries between its parts.

Owns: ``Run`` (the stream a run yields to, its signal and approval policy), ``next_message``
(taking the next message off that stream), ``Attempt`` (what one request span produced),
``WriteFailed`` (a record that could not be written: the fail-stop path, R-TRACE-15) and finding
it inside an exception group.  Does not: drive anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
from anyio.lowlevel import checkpoint_if_cancelled
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from eventstore import OmniMessage, TraceError

from ._protocols import ApproveFn, LLMOutcome
from ._signal import AbortSignal

__all__ = ["Attempt", "Run", "WriteFailed", "first_write_failure", "next_message"]


class WriteFailed(Exception):
    """A record could not be written: the run ends by the fail-stop path (R-TRACE-15)."""

    def __init__(self, cause: TraceError, *, fatal: bool) -> None:
        self.cause = cause
        self.fatal = fatal
        super().__init__(str(cause))


def first_write_failure(exc: BaseException) -> WriteFailed | None:
    """The ``WriteFailed`` that ``exc`` is or holds (task groups wrap it), else ``None``."""
    if isinstance(exc, WriteFailed):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = first_write_failure(inner)
            if found is not None:
                return found
    return None


@dataclass
class Run:
    """Per-run state: the stream, the signal and the approval policy."""

    send: MemoryObjectSendStream[OmniMessage]
    signal: AbortSignal
    approve: ApproveFn | None
    thinking_level: str | None
    done: anyio.Event = field(default_factory=anyio.Event)
    consumer_gone: bool = False
    # An error that ended the run outside the loop's own paths (e.g. a steering image fold that
    # failed, R-STEER-6): raised out of ``run()`` once the stream has drained.
    error: BaseException | None = None
    tap: Callable[[OmniMessage], None] | None = None  # sees every message (goal mode)
    observer: Callable[[OmniMessage], None] | None = None  # the caller's (``run(observer=)``)
    ended_by_abort: bool = False  # the loop emitted the run's ``abort``
    settings: OmniMessage | None = None  # the run's settings record (SPEC §23)

    def push(self, msg: OmniMessage) -> None:
        if self.tap is not None:
            self.tap(msg)
        if self.observer is not None:
            try:
                self.observer(msg)
            except Exception as exc:
                # The caller's bug, not the model's: inside the driver it would read as a failed
                # stream and be retried.  Stop calling it, interrupt the run as a caller who stops
                # reading would (R-CARRY-2), and raise it out of ``run()`` once the stream ends.
                self.observer = None
                if self.error is None:
                    self.error = exc
                self.signal.abort()
        if not self.consumer_gone:
            try:
                self.send.send_nowait(msg)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self.consumer_gone = True


@dataclass
class Attempt:
    """One request span's result."""

    outcome: LLMOutcome
    called_tools: bool  # the ledger holds at least one completed call
    outputs: list[OmniMessage]  # the complete assistant messages recorded, in order
    retry_in_ms: int | None = None  # the wait stamped on request_end (None: no in-run retry)


async def next_message(recv: MemoryObjectReceiveStream[OmniMessage]) -> OmniMessage | None:
    """The run's next message for ``run()`` to yield, ``None`` once the driver is done.

    What the driver pushed in one synchronous step is taken without a scheduler pass per message
    (``receive`` is a full checkpoint, a third of a streamed delta's cost); a cancellation of
    the caller's scope is still delivered before each message, and ``receive`` waits (a full
    checkpoint) when nothing is buffered."""
    try:
        msg = recv.receive_nowait()
    except anyio.WouldBlock:
        try:
            return await recv.receive()
        except anyio.EndOfStream:
            return None
    except anyio.EndOfStream:
        return None
    await checkpoint_if_cancelled()
    return msg
