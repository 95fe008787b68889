"""ModelContext and CarryOver: what the model sees next, as a fold over trace records.

Owns: SPEC §13.1–§13.2 (history, pending input, carry-over synthesis, pending summary, closed
context, render view) as an incremental fold.  Does not: read files, write records, or count
turns and tokens (``SessionState``, ``Usage``).

The live engine and resume share this fold (R-PROJ-3): the engine writes a record, folds it, and
builds every request from ``history`` and the snapshot taken at ``request_begin``.  Synthesized
input (placeholders, ``[turn_aborted]`` / ``[turn_retried]`` blocks, the rebuilt summary) is
derived lazily from recorded facts and stamped with the timestamps of the records it derives
from (R-PROJ-3a), so a fresh fold reproduces it byte for byte.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from eventstore import (
    HEAD_EVENT_TYPES,
    HOST_EVENT_TYPES,
    AbortPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    CompactionMode,
    CompactionReason,
    ImageUrlPayload,
    InlineDataPayload,
    InlineThinkingPayload,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    SessionMetaPayload,
    SettingsPayload,
    StopReason,
    TextPayload,
    ThinkingPayload,
    TokenUsagePayload,
    ToolCallOutputPayload,
    ToolCallPayload,
    ToolListReadyPayload,
)
from eventstore.builders import compaction_end as _compaction_end
from eventstore.builders import request_end as _request_end
from eventstore.builders import tool_call_output, user_text

from .markers import (
    COMPACTION_CLOSURE_ERROR,
    PLACEHOLDER_ABORTED,
    PLACEHOLDER_CRASH,
    REQUEST_CLOSURE_ERROR,
    downgrade_goal,
    downgrade_goal_message,
    extract_summary,
    is_goal_text,
    line_text,
    line_thinking,
    line_tool_call,
    line_tool_output,
    line_user_input,
    transcript_block,
    unwrap_synthetic_block,
    wrap_context_summary,
)

__all__ = ["CarryOver", "ModelContext"]

_PERMANENT_PREFIX = "llm request error:"


@dataclass
class _Attempt:
    """One request span outside compaction that did not commit."""

    snapshot: list[OmniMessage]
    begin_ts: str
    outputs: list[OmniMessage] = field(default_factory=list)
    status: StopReason = "aborted"
    end_ts: str = ""
    # Ledger: completed tool calls in call order, and the first output recorded for each.
    calls: list[OmniMessage] = field(default_factory=list)
    call_outputs: dict[str, OmniMessage] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """R-RETRY-11: segments, then ledger calls, then their outputs in call order."""
        out: list[str] = []
        for msg in self.outputs:
            p = msg.payload
            if isinstance(p, ThinkingPayload):
                out.append(line_thinking(p.thinking))
            elif isinstance(p, TextPayload):
                out.append(line_text(p.text))
        for call in self.calls:
            cp = call.payload
            assert isinstance(cp, ToolCallPayload)
            out.append(line_tool_call(cp.name, cp.tool_call_id, cp.arguments))
        for call in self.calls:
            cp = call.payload
            assert isinstance(cp, ToolCallPayload)
            output = self.call_outputs.get(cp.tool_call_id)
            if output is not None:
                op = output.payload
                assert isinstance(op, ToolCallOutputPayload)
                out.append(
                    line_tool_output(op.tool_call_id, op.stop_reason or "completed", op.output)
                )
        return out


@dataclass
class _Turn:
    """The failed attempts of one turn, and how the turn's input was finally left."""

    original_input: list[OmniMessage]
    attempts: list[_Attempt] = field(default_factory=list)
    # Set by the first closing record after the last failed request_end (R-RESUME-7b).
    settled: bool = False
    abort_ts: str | None = None
    abort_reason: str | None = None

    def case_b(self) -> bool:
        last = self.attempts[-1]
        if last.status in ("aborted", "auth"):
            return True
        return (
            last.status == "failed"
            and self.abort_reason is not None
            and self.abort_reason.startswith(_PERMANENT_PREFIX)
        )

    def render(self) -> list[OmniMessage]:
        last = self.attempts[-1]
        if self.case_b():
            ts = self.abort_ts or last.begin_ts
            kept: list[OmniMessage] = []
            lines: list[str] = []
            for msg in last.snapshot:
                p = msg.payload
                if isinstance(p, ToolCallOutputPayload):
                    kept.append(msg)
                elif isinstance(p, TextPayload):
                    inner = unwrap_synthetic_block(p.text)
                    if inner is not None:
                        if inner:
                            lines.append(inner)
                    else:
                        lines.append(line_user_input(downgrade_goal(p.text)))
            lines.extend(last.lines())
            kept.append(user_text(transcript_block("turn_aborted", lines), timestamp=ts))
            return kept
        lines = [line for attempt in self.attempts for line in attempt.lines()]
        rendered = list(self.original_input)
        if lines:
            rendered.append(
                user_text(transcript_block("turn_retried", lines), timestamp=last.end_ts)
            )
        return rendered


class ModelContext:
    """The model context as a fold (R-PROJ-1).

    Public views: ``history`` (committed messages), ``pending`` (the carry-over, synthesized
    messages included), ``pending_summary``, ``closed``, ``dangling_compaction``, ``render``.
    ``snapshot`` is the input of the request currently open (what the engine sends).
    """

    def __init__(self) -> None:
        self._history: list[OmniMessage] = []
        self._pending: list[OmniMessage] = []
        self._render: list[OmniMessage] = []
        self._pending_summary: OmniMessage | None = None
        self._closed = False
        self._seen_meta = False
        self._new_file = False
        # Open request span.
        self._in_request = False
        self._snapshot: list[OmniMessage] = []
        self._outputs: list[OmniMessage] = []
        self._span_usage = False
        self._span_begin_ts = ""
        self._span_texts: list[str] = []
        # Timestamp and reason of an ``abort`` written inside the open span (R-TRACE-15a).
        self._span_abort: tuple[str, str | None] | None = None
        # The open request's input as recorded, before the goal downgrade (R-COMPACT-28 puts
        # a compaction's carry-over back exactly).
        self._snapshot_raw: list[OmniMessage] = []
        # R-CARRY-12: the goal text most recently folded (its id) while no later user input or
        # ``abort`` has ended its run; every other goal text in an input is carry-over.
        # Several goal texts can open one Prompt: all of it is the run's own input.
        self._fresh_goals: set[int] = set()
        self._prompt_open = False  # the last record was a user input (a Prompt being recorded)
        self._goal_seen = False
        # Compaction span.
        self._compaction: tuple[CompactionReason, CompactionMode] | None = None
        self._compaction_prompt: OmniMessage | None = None
        self._compaction_committed = False
        self._compaction_inputs: list[OmniMessage] = []
        self._compaction_requests = 0
        self._last_span_texts: list[str] = []
        # Calls: order of every committed call; committed calls with no answer yet.
        self._call_seq: dict[str, int] = {}
        self._unanswered: dict[str, OmniMessage] = {}
        self._answered: set[str] = set()
        self._window: list[str] = []
        self._abort_explained: dict[str, str] = {}
        # Uncommitted turn attempts (R-RESUME-7, -7b).
        self._turn: _Turn | None = None  # the turn whose attempts are being retried
        self._dropped: _Turn | None = None  # a dropped turn standing in front of pending
        self._attempt_of_call: dict[str, _Attempt] = {}
        self._view_cache: list[OmniMessage] | None = None
        # Placeholders this fold synthesized, by identity: one that a compaction attempt put
        # back into pending stays behind the real outputs (R-CARRY-3), never sorted among them.
        self._synthesized: dict[int, OmniMessage] = {}

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_records(cls, records: Iterable[OmniMessage]) -> ModelContext:
        ctx = cls()
        for record in records:
            ctx.apply(record)
        return ctx

    def copy(self) -> ModelContext:
        """An independent fold state (lists and maps copied; messages are immutable)."""
        # OmniMessages are immutable and copy to themselves, so this copies only fold state.
        return copy.deepcopy(self)

    # ------------------------------------------------------------------ views

    @property
    def history(self) -> list[OmniMessage]:
        return self._settled()._history

    @property
    def pending(self) -> list[OmniMessage]:
        return self._settled()._view()

    @property
    def pending_summary(self) -> OmniMessage | None:
        return self._settled()._pending_summary

    @property
    def closed(self) -> bool:
        return self._settled()._closed

    @property
    def render(self) -> list[OmniMessage]:
        return self._settled()._render

    @property
    def dangling_compaction(self) -> tuple[CompactionReason, CompactionMode] | None:
        return self._compaction

    @property
    def open_request(self) -> bool:
        return self._in_request

    @property
    def snapshot(self) -> list[OmniMessage]:
        """The input of the open request (empty when none is open)."""
        return self._snapshot if self._in_request else []

    @property
    def in_compaction(self) -> bool:
        return self._compaction is not None

    @property
    def open_request_usage(self) -> bool:
        """The open request recorded its ``token_usage`` (its stream finished, R-RESUME-7a)."""
        return self._in_request and self._span_usage

    @property
    def open_attempt(self) -> int:
        """The attempt number of the open request within its turn or compaction (R-RETRY-7)."""
        if self._compaction is not None:
            return self._compaction_requests
        return len(self._turn.attempts) + 1 if self._turn is not None else 1

    @property
    def compaction_requests(self) -> int:
        """Request spans inside the open compaction span (R-RESUME-14)."""
        return self._compaction_requests if self._compaction is not None else 0

    def closure_records(self) -> list[OmniMessage]:
        """R-RESUME-14a then R-RESUME-14: the records that close the spans left open (none when
        nothing is open).  Resume appends them; so does a live session whose run ended inside a
        span while its writer stays usable (R-TRACE-15a)."""
        out: list[OmniMessage] = []
        if self._in_request:
            attempt = self.open_attempt
            if self._span_usage:
                out.append(_request_end("completed", attempt=attempt if attempt > 1 else None))
            else:
                out.append(
                    _request_end("aborted", error_message=REQUEST_CLOSURE_ERROR, attempt=attempt)
                )
        if self._compaction is not None:
            reason, mode = self._compaction
            out.append(
                _compaction_end(
                    reason,
                    mode,
                    "failed",
                    attempt=self._compaction_requests or None,
                    error_message=COMPACTION_CLOSURE_ERROR,
                )
            )
        return out

    def request_messages(self) -> list[OmniMessage]:
        """History plus the open request's input: the ``messages`` of the request being sent."""
        return [*self._history, *self._snapshot]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ModelContext):
            return NotImplemented
        a, b = self._settled(), other._settled()
        return (
            a._history == b._history
            and a._view() == b._view()
            and a._pending_summary == b._pending_summary
            and a._closed == b._closed
            and self._compaction == other._compaction
            and a._render == b._render
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"ModelContext(history={len(self.history)}, pending={len(self.pending)}, "
            f"summary={self.pending_summary is not None}, closed={self.closed})"
        )

    def _settled(self) -> ModelContext:
        """The state the trace would have if it ended here (R-RESUME-14a/14 closures applied).

        Closing a dangling span changes no view (R-RESUME-14a), so views of an open span are
        read from a closed copy.
        """
        if not self._in_request and self._compaction is None:
            return self
        clone = self.copy()
        ts = self._span_begin_ts
        if clone._in_request:
            status: StopReason = "completed" if clone._span_usage else "aborted"
            clone.apply(_request_end(status, timestamp=ts))
        if clone._compaction is not None:
            reason, mode = clone._compaction
            clone.apply(_compaction_end(reason, mode, "failed", timestamp=ts))
        clone._compaction = None
        return clone

    # ------------------------------------------------------------------ the fold

    def apply(self, record: OmniMessage) -> None:
        """Fold one record (R-RESUME-4 … R-RESUME-15)."""
        if record.origin is not None:
            return
        p = record.payload
        kind = type(p)
        if kind in HOST_EVENT_TYPES:
            return  # a host's mark (``session_archived``): no part of the conversation
        if kind is SessionMetaPayload or record.type == "session_meta":
            if self._seen_meta:
                self._new_file = True
            self._seen_meta = True
            return
        if self._new_file and kind not in HEAD_EVENT_TYPES:
            self._new_file = False
            self._reset(keep_summary=False)
        self._view_cache = None
        # Dispatch on the exact payload type (partials and unknown payloads have no handler).
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, record, p)
        if handler is not _ON_USER_INPUT and kind is not SettingsPayload:
            # A settings record (written before a run's input, SPEC §23) is not part of the
            # conversation: it neither ends nor starts a Prompt.
            self._prompt_open = False

    # ------------------------------------------------------------------ model messages

    def _on_user_input(self, record: OmniMessage, p: Any) -> None:
        if p.role != "user":
            self._prompt_open = False
            # ``_on_assistant``, inlined: every assistant text comes this way.
            if p.role == "assistant":
                self._render.append(record)
                if self._in_request:
                    self._outputs.append(record)
                    if type(p) is TextPayload:
                        self._span_texts.append(p.text)
            return
        if self._closed:
            self._reopen()
        self._render.append(record)
        if not self._prompt_open:
            # A user input after anything else starts a new Prompt: goal texts recorded before
            # it belong to ended runs (R-CARRY-12); those of this Prompt stay its own.
            self._fresh_goals = set()
        if type(p) is TextPayload and p.text.startswith("[goal]\n") and is_goal_text(p.text):
            self._fresh_goals.add(id(record))
            self._goal_seen = True
        # ``_close_windows``, inlined: this runs for every user input.
        if self._window:
            self._window.clear()
        if self._dropped is not None:
            self._dropped.settled = True
        if self._compaction is not None and type(p) is TextPayload:
            if self._compaction_prompt is None:
                self._compaction_prompt = record
            self._compaction_inputs.append(record)
        self._pending.append(record)
        self._prompt_open = True

    def _on_tool_output(self, record: OmniMessage, p: ToolCallOutputPayload) -> None:
        if p.role != "user":
            return
        if self._closed:
            self._reopen()
        self._render.append(record)
        if self._attempt_of_call:
            attempt = self._attempt_of_call.get(p.tool_call_id)
            if attempt is not None:
                attempt.call_outputs.setdefault(p.tool_call_id, record)
        self._pending.append(record)

    def _on_assistant(self, record: OmniMessage, p: Any) -> None:
        if p.role != "assistant":
            return
        self._render.append(record)
        if self._in_request:
            self._outputs.append(record)
            if type(p) is TextPayload:
                self._span_texts.append(p.text)

    # ------------------------------------------------------------------ events

    def _on_request_end(self, record: OmniMessage, p: RequestEndPayload) -> None:
        if not self._in_request:
            return
        if p.status == "completed":
            self._commit()
        else:
            self._drop_open_request(record.timestamp, p.status)

    def _on_token_usage(self, record: OmniMessage, p: TokenUsagePayload) -> None:
        if self._in_request:
            self._span_usage = True

    def _on_abort_record(self, record: OmniMessage, p: AbortPayload) -> None:
        self._render.append(record)
        self._fresh_goals = set()
        if self._in_request and self._span_abort is None:
            # R-RESUME-10: the span's calls belong to the run this abort ended, although they
            # commit only at the closure record that follows it (R-TRACE-15a).
            self._span_abort = (record.timestamp, p.reason)
        self._on_abort(record.timestamp, p.reason)

    def _on_compaction_begin(self, record: OmniMessage, p: CompactionBeginPayload) -> None:
        self._close_windows()
        self._fresh_goals = set()
        self._compaction = (p.reason, p.mode)
        self._compaction_prompt = None
        self._compaction_committed = False
        self._compaction_inputs = []
        self._compaction_requests = 0
        self._last_span_texts = []

    def _on_compaction_end(self, record: OmniMessage, p: CompactionEndPayload) -> None:
        self._end_compaction(record, p)

    def _on_tool_list(self, record: OmniMessage, p: ToolListReadyPayload) -> None:
        self._close_windows()

    # ------------------------------------------------------------------ requests

    def _begin_request(self, record: OmniMessage, p: RequestBeginPayload) -> None:
        """The ``request_begin`` handler: the request's input is the view of pending now."""
        if self._in_request:
            # R-RESUME-15b: its request_end was lost; it ends as a failed attempt.
            self._drop_open_request(record.timestamp, "failed")
        if self._closed:
            self._reopen()
        dropped = self._dropped
        retried = dropped is not None and not dropped.settled
        # ``_close_windows``, inlined.
        if self._window:
            self._window.clear()
        if dropped is not None:
            dropped.settled = True
        # The input: the cached view, plus the compaction prompt once committed (inlined: hot path).
        cache = self._view_cache
        if cache is None:
            cache = self._view_cache = self._compute_view()
        snapshot = list(cache)
        if self._compaction is not None and self._compaction_committed:
            prompt = self._compaction_prompt
            if prompt is not None and not (snapshot and snapshot[-1] is prompt):
                snapshot.append(prompt)
        self._snapshot_raw = snapshot
        if self._goal_seen:
            snapshot = self._downgrade_goals(snapshot)
        self._turn = dropped if retried else None
        self._dropped = None
        self._pending = []
        self._snapshot = snapshot
        self._span_abort = None
        self._outputs = []
        self._span_texts = []
        self._span_usage = False
        self._span_begin_ts = record.timestamp
        self._in_request = True
        if self._compaction is not None:
            self._compaction_requests += 1

    def _downgrade_goals(self, snapshot: list[OmniMessage]) -> list[OmniMessage]:
        """R-RUN-5, R-COMPACT-28, R-CARRY-12: goal texts of ended runs in an input are sent
        downgraded; the run's own goal prompt (and a retry's copy of it, INV-14) is not."""
        fresh = self._fresh_goals
        return [m if id(m) in fresh else downgrade_goal_message(m) for m in snapshot]

    def _commit(self) -> None:
        """R-RESUME-6: a completed request commits its input and its output."""
        self._in_request = False
        snapshot, outputs = self._snapshot, self._outputs
        history = self._history
        history += snapshot
        history += outputs
        answered, unanswered = self._answered, self._unanswered
        for msg in snapshot:
            p = msg.payload
            if isinstance(p, ToolCallOutputPayload):
                cid = p.tool_call_id
                answered.add(cid)
                unanswered.pop(cid, None)
        call_seq, attempt_of_call = self._call_seq, self._attempt_of_call
        for msg in outputs:
            p = msg.payload
            if isinstance(p, ToolCallPayload) and (p.stop_reason or "completed") == "completed":
                cid = p.tool_call_id
                if attempt_of_call:
                    attempt_of_call.pop(cid, None)
                if cid in call_seq:
                    continue
                call_seq[cid] = len(call_seq)
                if cid not in answered:
                    unanswered[cid] = msg
                    self._window.append(cid)
                    if self._span_abort is not None:
                        self._abort_explained.setdefault(cid, self._span_abort[0])
        self._turn = None
        if self._compaction is not None:
            self._compaction_committed = True
            self._last_span_texts = self._span_texts
        self._snapshot = []
        self._snapshot_raw = []
        self._outputs = []
        self._span_abort = None
        if self._synthesized:
            # The committed placeholders are history now; keep those still in pending.
            known = self._synthesized
            self._synthesized = {id(m): m for m in self._pending if id(m) in known}

    def _drop_open_request(self, ts: str, status: StopReason = "aborted") -> None:
        """R-RESUME-7: a request that did not commit gives its input back."""
        self._in_request = False
        snapshot = self._snapshot
        if self._compaction is not None:
            # R-RESUME-7c: a compaction attempt's input is put back whole, as recorded
            # (R-COMPACT-28: the carry-over is restored exactly; the next attempt downgrades it).
            self._pending = [*self._snapshot_raw, *self._pending]
        else:
            attempt = _Attempt(snapshot=snapshot, begin_ts=self._span_begin_ts)
            attempt.outputs = self._outputs
            attempt.status = status
            attempt.end_ts = ts
            for msg in self._outputs:
                p = msg.payload
                if (
                    isinstance(p, ToolCallPayload)
                    and (p.stop_reason or "completed") == "completed"
                    and p.tool_call_id not in self._call_seq
                ):
                    attempt.calls.append(msg)
                    self._attempt_of_call[p.tool_call_id] = attempt
            # Outputs of this attempt's tools that already landed in pending.
            for msg in self._pending:
                op = msg.payload
                if isinstance(op, ToolCallOutputPayload):
                    owner = self._attempt_of_call.get(op.tool_call_id)
                    if owner is attempt:
                        attempt.call_outputs.setdefault(op.tool_call_id, msg)
            turn = self._turn
            if turn is None:
                turn = _Turn(original_input=snapshot)
            turn.attempts.append(attempt)
            # R-RESUME-7b: an abort written inside the span ended the run; no retry follows.
            turn.settled = self._span_abort is not None
            if self._span_abort is not None:
                turn.abort_reason = self._span_abort[1]
            self._turn = None
            self._dropped = turn
        self._snapshot = []
        self._snapshot_raw = []
        self._outputs = []
        self._span_abort = None

    # ------------------------------------------------------------------ aborts and windows

    def _close_windows(self) -> None:
        """Records that end the run a call belongs to (R-RESUME-10, R-RESUME-7b)."""
        self._window.clear()
        if self._dropped is not None:
            self._dropped.settled = True

    def _on_abort(self, ts: str, reason: str | None) -> None:
        for cid in self._window:
            if cid in self._unanswered:
                self._abort_explained.setdefault(cid, ts)
        self._window.clear()
        dropped = self._dropped
        if dropped is not None and not dropped.settled:
            dropped.settled = True
            dropped.abort_ts = ts
            dropped.abort_reason = reason

    # ------------------------------------------------------------------ compaction

    def _end_compaction(self, record: OmniMessage, p: CompactionEndPayload) -> None:
        if self._in_request:
            # R-RESUME-15b: a span left open inside the compaction closes as R-RESUME-14a would.
            if self._span_usage:
                self._commit()
            else:
                self._drop_open_request(record.timestamp)
        # R-RESUME-15: only a completed request span inside this compaction span gives the
        # summary; with its compaction_begin lost there is none.
        texts = self._last_span_texts if self._compaction is not None else []
        self._last_span_texts = []
        self._compaction = None
        if p.status == "completed":
            if p.mode == "discard":
                self._reset(keep_summary=False)
                self._closed = True
                return
            summary = extract_summary("".join(texts))
            if summary:
                self._reset(keep_summary=False)
                self._closed = True
                self._pending_summary = user_text(
                    wrap_context_summary(summary), timestamp=record.timestamp
                )
                return
            # A void closure (R-RESUME-15): the file is replayed on as if nothing closed.
        # R-RESUME-7c: the compaction prompt and corrective notes are not conversational input.
        drop = {id(m) for m in self._compaction_inputs}
        self._pending = [m for m in self._pending if id(m) not in drop]
        self._compaction_inputs = []
        self._compaction_prompt = None

    def _reset(self, *, keep_summary: bool) -> None:
        self._synthesized = {}
        self._history = []
        self._pending = []
        self._render = []
        if not keep_summary:
            self._pending_summary = None
        self._closed = False
        self._in_request = False
        self._snapshot = []
        self._snapshot_raw = []
        self._outputs = []
        self._span_abort = None
        self._fresh_goals = set()
        self._compaction = None
        self._compaction_prompt = None
        self._compaction_inputs = []
        self._last_span_texts = []
        self._call_seq = {}
        self._unanswered = {}
        self._answered = set()
        self._window = []
        self._abort_explained = {}
        self._turn = None
        self._dropped = None
        self._attempt_of_call = {}

    def _reopen(self) -> None:
        """A record after a completed compaction in the same file starts the next context."""
        summary = self._pending_summary
        self._reset(keep_summary=True)
        self._pending_summary = summary

    # ------------------------------------------------------------------ the carry-over view

    def _view(self) -> list[OmniMessage]:
        """R-RESUME-9: pending with dropped turns rendered, outputs filtered and ordered, and
        placeholders for committed calls nobody answered."""
        cache = self._view_cache
        if cache is None:
            cache = self._view_cache = self._compute_view()
        return list(cache)

    def _compute_view(self) -> list[OmniMessage]:
        """``_view`` without the cache: a new list every call."""
        if self._dropped is None:
            # The common case, checked in one pass: pending's outputs answer distinct
            # unanswered calls, in call order, and all of them.  ``_general_view`` would then
            # keep every message in place and add no placeholder: the view is pending.
            unanswered, order = self._unanswered, self._call_seq
            last = -1
            found = 0
            for msg in self._pending:
                p = msg.payload
                if isinstance(p, ToolCallOutputPayload):
                    cid = p.tool_call_id
                    if cid not in unanswered:
                        break
                    at = order[cid]
                    if at <= last:
                        break
                    last = at
                    found += 1
            else:
                if found == len(unanswered):
                    return list(self._pending)
        return self._general_view()

    def _general_view(self) -> list[OmniMessage]:
        """``_compute_view`` for any fold state, without the shortcut."""
        unanswered = self._unanswered
        order = self._call_seq
        result: list[OmniMessage] = []
        seen: set[str] = set()
        last_output = -1
        if self._dropped is not None:
            # A dropped turn's input was sent as an input already (its outputs ordered, its
            # placeholders after them): it is re-sent as it was, never re-sorted (R-CARRY-3,
            # R-RESUME-9, INV-14).
            for msg in self._dropped.render():
                p = msg.payload
                if isinstance(p, ToolCallOutputPayload):
                    cid = p.tool_call_id
                    if cid not in unanswered or cid in seen:
                        continue
                    seen.add(cid)
                    last_output = len(result)
                result.append(msg)
        slots: list[int] = []
        outputs: list[OmniMessage] = []
        for msg in self._pending:
            p = msg.payload
            if isinstance(p, ToolCallOutputPayload):
                cid = p.tool_call_id
                if cid not in unanswered or cid in seen:
                    continue
                seen.add(cid)
                slots.append(len(result))
                last_output = len(result)
                outputs.append(msg)
            result.append(msg)
        if outputs:
            synthesized = self._synthesized
            outputs.sort(
                key=lambda m: (id(m) in synthesized, order[m.payload.tool_call_id])  # type: ignore[union-attr]
            )
            for slot, msg in zip(slots, outputs, strict=True):
                result[slot] = msg
        missing = [cid for cid in unanswered if cid not in seen]
        if missing:
            at = last_output + 1
            placeholders = [self._placeholder(cid) for cid in missing]
            result[at:at] = placeholders
        return result

    def _placeholder(self, cid: str) -> OmniMessage:
        abort_ts = self._abort_explained.get(cid)
        if abort_ts is not None:
            msg = tool_call_output(
                cid, PLACEHOLDER_ABORTED, stop_reason="aborted", timestamp=abort_ts
            )
        else:
            call = self._unanswered[cid]
            msg = tool_call_output(
                cid, PLACEHOLDER_CRASH, stop_reason="aborted", timestamp=call.timestamp
            )
        self._synthesized[id(msg)] = msg
        return msg


_HANDLERS: dict[type[Any], Callable[[ModelContext, OmniMessage, Any], None]] = {
    TextPayload: ModelContext._on_user_input,
    ImageUrlPayload: ModelContext._on_user_input,
    InlineDataPayload: ModelContext._on_user_input,
    ToolCallOutputPayload: ModelContext._on_tool_output,
    ThinkingPayload: ModelContext._on_assistant,
    InlineThinkingPayload: ModelContext._on_assistant,
    ToolCallPayload: ModelContext._on_assistant,
    RequestBeginPayload: ModelContext._begin_request,
    RequestEndPayload: ModelContext._on_request_end,
    TokenUsagePayload: ModelContext._on_token_usage,
    AbortPayload: ModelContext._on_abort_record,
    CompactionBeginPayload: ModelContext._on_compaction_begin,
    CompactionEndPayload: ModelContext._on_compaction_end,
    ToolListReadyPayload: ModelContext._on_tool_list,
}
_ON_USER_INPUT: Final = ModelContext._on_user_input


class CarryOver:
    """The carry-over part of the ``ModelContext`` fold (R-PROJ-1a).

    ``messages`` is the input that the next run sends before its prompt, synthesized messages
    included; it equals ``ModelContext.pending`` because it is computed by the same fold.
    """

    def __init__(self) -> None:
        self._ctx = ModelContext()

    @classmethod
    def from_records(cls, records: Iterable[OmniMessage]) -> CarryOver:
        carry = cls()
        for record in records:
            carry.apply(record)
        return carry

    def apply(self, record: OmniMessage) -> None:
        self._ctx.apply(record)

    @property
    def messages(self) -> list[OmniMessage]:
        return self._ctx.pending

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CarryOver):
            return NotImplemented
        return self.messages == other.messages

    __hash__ = None  # type: ignore[assignment]
