"""The record path of a session: write, then fold, then tell the listeners (R-PROJ-3).

Owns: the session's ``TraceWriter`` (opened on the first record), ``session_meta`` first in every
file, rotation with the session's own head (R-TRACE-8/9, R-TRACE-19 summaries), the head folded
with the first record after it (R-ROOT-10), the fail-stop flag (R-TRACE-15), shrinking an
oversized tool output until it fits (R-TRACE-17), the last ``abort`` after a write failure
(R-TRACE-15a) and the record listeners.  Does not: decide what to record (the session, the turn
runner and the compaction runner do), or push anything onto a run's stream except through
``emit``'s ``push``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from eventstore import (
    FsyncPolicy,
    OmniMessage,
    RecordTooLarge,
    SettingsPayload,
    ToolCallOutputPayload,
    TraceError,
    TraceWriteError,
    TraceWriter,
    encode_line,
)
from eventstore import builders as b
from projections import ModelContext, SessionState
from projections import markers as mk

from ._run import WriteFailed
from ._summaries import store_file_summary

__all__ = ["RecordListener", "Recorder"]

RecordListener = Callable[[OmniMessage, Path], None]
"""Called with each record right after it is written and folded, and the file it went to."""


class Recorder:
    """Writes one session's records and keeps its projections (the session's only state)."""

    def __init__(
        self,
        *,
        session_id: str,
        meta: OmniMessage,
        trace_path: Path,
        fsync: FsyncPolicy,
        writer: TraceWriter | None = None,
        context: ModelContext | None = None,
        state: SessionState | None = None,
    ) -> None:
        self._id = session_id
        self.meta = meta
        self._trace_path = trace_path
        self._fsync: FsyncPolicy = fsync
        self.writer = writer
        self.context = context if context is not None else ModelContext()
        self.state = state if state is not None else SessionState()
        self.meta_written = writer is not None
        self.write_failed = False
        # The current file holds nothing but its rotation head (R-ROOT-10 residue if we stop),
        # and that head, not folded yet.
        self._head_only = False
        self._head_records: list[OmniMessage] = []
        self._tool_list: OmniMessage | None = None
        self._tool_list_in_file = False
        # A settings record to write at the next rotation head instead of before it (R-SET-2).
        self._settings_next: OmniMessage | None = None
        self._listeners: list[RecordListener] = []

    @property
    def trace_path(self) -> Path:
        return self.writer.path if self.writer is not None else self._trace_path

    # ------------------------------------------------------------------ writing

    def record(self, msg: OmniMessage) -> None:
        """Write one record, then fold it (R-PROJ-3).  Raises ``WriteFailed``."""
        if self.write_failed:
            raise WriteFailed(
                TraceWriteError("an earlier append failed", path=self.trace_path), fatal=True
            )
        try:
            writer = self.writer
            if writer is None:
                writer = self.writer = self._open_writer()
            if not self.meta_written:
                writer.append(self.meta)
                self.meta_written = True
                self._fold(self.meta)
            elif self.state.rotation_pending and not self._head_only:
                # (A head already written stays: a record refused after it goes on in that file.)
                try:
                    self._rotate(writer)
                except RecordTooLarge as exc:
                    # The session's own head cannot be written, so no new file can start.
                    self.write_failed = True
                    raise WriteFailed(exc, fatal=True) from None
            writer.append(msg)
            self._head_only = False
            # A head is folded with the first record after it: alone it is residue that resume
            # ignores (R-ROOT-10), and the live projections must read as resume's would.
            if self._head_records:
                head, self._head_records = self._head_records, []
                for record in head:
                    self._fold(record)
        except RecordTooLarge as exc:
            raise WriteFailed(exc, fatal=False) from None
        except TraceError as exc:
            self.write_failed = True
            raise WriteFailed(exc, fatal=True) from None
        self._fold(msg)

    def _open_writer(self) -> TraceWriter:
        return TraceWriter(self._trace_path, fsync=self._fsync, session_id=self._id)

    def emit(self, msg: OmniMessage, push: Callable[[OmniMessage], None]) -> None:
        """Write a recordable message, then push it onto a run's stream (R-TRACE-13)."""
        self.record(msg)
        push(msg)

    def _fold(self, msg: OmniMessage) -> None:
        self.context.apply(msg)
        self.state.apply(msg)
        if self._listeners:
            path = self.trace_path
            for listener in tuple(self._listeners):
                listener(msg, path)

    def _rotate(self, writer: TraceWriter) -> None:
        """R-TRACE-8/9: the next file starts with the session's own head records."""
        closed = writer.path
        self._trace_path = writer.rotate()
        store_file_summary(closed)  # R-TRACE-19
        self._head_only = True
        writer.append(self.meta)
        self._head_records.append(self.meta)
        self._tool_list_in_file = False
        if self._tool_list is not None:
            writer.append(self._tool_list)
            self._head_records.append(self._tool_list)
            self._tool_list_in_file = True
        # R-SET-2c: each file carries the settings it is written under, right after
        # tool_list_ready — stamped like the rest of the head (R-TRACE-9), which V-20 exempts.
        settings, self._settings_next = self._settings_next, None
        payload = settings.payload if settings is not None else self.state.settings
        if isinstance(payload, SettingsPayload):
            head = self._head_records[-1].timestamp
            settings = b.settings(payload, timestamp=head)
            writer.append(settings)
            self._head_records.append(settings)

    def add_listener(self, listener: RecordListener) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    # ------------------------------------------------------------------ settings

    def record_settings(self, msg: OmniMessage, *, timestamp: str | None = None) -> None:
        """R-SET-2: write a settings record before a run's input — unless a rotation is
        pending: then the new file's head carries it, written with the next record.  Like the
        prompt, it is recorded, not streamed: the caller chose it.  Nothing when the recorded
        settings are the same (R-SET-2b)."""
        if msg.payload == self.state.settings:
            return
        if self.meta_written and self.state.rotation_pending and not self._head_only:
            self._settings_next = msg
            return
        # Stamped as the run's input it precedes (R-SET-6: when it is written), so the trace's
        # timestamps do not go back at the input.
        self.record(b.settings(msg.payload, timestamp=timestamp))  # type: ignore[arg-type]

    # ------------------------------------------------------------------ the tool list

    def set_tool_list(self, record: OmniMessage) -> None:
        """The ``tool_list_ready`` of this session object (part of every rotation head)."""
        self._tool_list = record

    def emit_tool_list(self, push: Callable[[OmniMessage], None]) -> None:
        """R-RUN-6: write the tool list unless the current file holds it already."""
        if not self._tool_list_in_file and self._tool_list is not None:
            self.emit(self._tool_list, push)
            self._tool_list_in_file = True

    # ------------------------------------------------------------------ special records

    def record_tool_output(self, msg: OmniMessage) -> OmniMessage:
        """R-TRACE-17: an oversized tool output is shortened until it fits, then written."""
        try:
            self.record(msg)
            return msg
        except WriteFailed as exc:
            if not isinstance(exc.cause, RecordTooLarge):
                raise
            shortened = shrink_output(msg, exc.cause.limit)
            self.record(shortened)
            return shortened

    def record_last_abort(self, failure: WriteFailed) -> tuple[OmniMessage, str | None]:
        """R-TRACE-15/15a: the ``abort`` that ends a run after ``failure``, written if it can
        be (once), and the cause that breaks the session (``None``: it is not broken)."""
        cause = failure.cause
        if isinstance(cause, RecordTooLarge):
            msg, broken = b.abort(mk.abort_record_too_large(cause.size)), None
        else:
            msg, broken = b.abort(mk.abort_trace_write_failed(str(cause))), str(cause)
        if not self.meta_written:
            return msg, broken  # R-TRACE-5: no file may hold an abort without its session_meta
        if self._head_only:
            # A failure right after a rotation: the new file is still crash residue that resume
            # skips (R-ROOT-10), which keeps the compacted context and its summary.  An abort
            # written there would make it a context of its own and lose the summary.
            return msg, broken
        if not failure.fatal:
            try:
                self.record(msg)
                # R-TRACE-15a: the writer still works, so the spans the failure left open are
                # closed now, as resume would close them, and the next run starts outside them.
                for closure in self.context.closure_records():
                    self.record(closure)
            except WriteFailed as second:
                if second.fatal:
                    broken = str(second.cause)
        elif self.writer is not None and not self.writer.poisoned:
            try:
                self.writer.append(msg)
            except TraceError:
                return msg, broken
            for listener in tuple(self._listeners):
                listener(msg, self.trace_path)
        return msg, broken

    def close(self) -> None:
        writer, self.writer = self.writer, None
        if writer is not None:
            try:
                writer.close()
            except TraceError:
                pass


def shrink_output(msg: OmniMessage, limit: int) -> OmniMessage:
    """The longest head of a tool output that, with its truncation note, encodes within
    ``limit`` bytes (images dropped first when they alone are too big)."""
    p = msg.payload
    assert isinstance(p, ToolCallOutputPayload)
    status = p.stop_reason or "completed"

    def build(text: str, images: list[str] | None) -> OmniMessage:
        return b.tool_call_output(
            p.tool_call_id, text, stop_reason=status, images=images, timestamp=msg.timestamp
        )

    images = p.images
    if images and len(encode_line(build(p.output, images))) > limit:
        images = None
    candidate = build(p.output, images)
    if len(encode_line(candidate)) <= limit:
        return candidate
    lo, hi = 0, len(p.output)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        text = p.output[:mid] + "\n" + mk.output_truncated_note(mid)
        if len(encode_line(build(text, images))) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return build(p.output[:lo] + "\n" + mk.output_truncated_note(lo), images)
