"""The ``SessionState`` projection (SPEC R-PROJ-2).

Owns: the session-wide counters and flags folded from the records of all files of a session —
turns, token counters, open spans, "opened by compaction", pending rotation, an advisory
"task running" — incrementally, O(1) amortized per record.  Does not: build the model context
or the carry-over (``ModelContext`` / ``CarryOver``), account per-request usage (``Usage``), or
read files.

Decisions the fold has to take on traces the engine never writes (lost lines, reference
traces), stated once:

- A request span cut off by a ``request_begin`` is uncommitted (R-RESUME-5); one cut off by the
  end of its file (a later ``session_meta``, or the end of the records) is committed when its
  ``token_usage`` was recorded (R-RESUME-7a, R-RESUME-18).  The turn counters therefore count a
  turn provisionally as soon as its ``token_usage`` arrives inside the span, so that the
  R-RESUME-14a closure ``request_end{completed}`` changes none of them, and take it back when
  the span ends any other way.
- A ``request_end`` with no open span (its ``request_begin`` lost) commits nothing and counts no
  turn, as ``ModelContext`` commits nothing for it; it still sets ``last_request_status``.
- A ``compaction_end`` while a request span is open first closes that span as R-RESUME-14a
  would — committed when its ``token_usage`` was recorded (R-RESUME-15b) — as ``ModelContext``
  does.
- Every ``session_meta`` after the first starts a new context, but only once a record other than
  ``tool_list_ready`` follows it: a trailing rotation head is crash residue (R-ROOT-10, R-PROJ-1),
  which leaves the previous file's state standing and only makes ``rotation_pending`` true.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from eventstore import (
    HEAD_EVENT_TYPES,
    HOST_EVENT_TYPES,
    PARTIAL_PAYLOAD_TYPES,
    AbortPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    CompactionMode,
    CompactionReason,
    GoalFinishedPayload,
    ImageUrlPayload,
    InlineDataPayload,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    SessionMetaPayload,
    SettingsPayload,
    StopReason,
    TextPayload,
    TokenCounts,
    TokenUsagePayload,
    ToolCallPayload,
)

from ._goal import GoalState
from ._status import RunEnd, SessionStatus, TaskActivity, session_status
from .markers import ABORT_BY_USER, extract_summary

__all__ = ["SessionSettings", "SessionState", "StateSummary"]

SessionSettings = SettingsPayload
"""The settings fold's value (R-SET-1): the last ``settings`` record's payload, which states the
complete settings in effect.  ``SessionState.settings`` is ``None`` for a trace that has none (a
reference trace: its settings are the defaults)."""


class StateSummary(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """What ``SessionState`` needs from one closed file (R-TRACE-19): the state its records
    fold to from a fresh state, plus which carried values the file set.

    ``mergeable`` is false for a file that does not start with its ``session_meta`` followed by
    a record other than its rotation head (a fragment, crash residue): its fold depends on the
    files before it, and ``FileSummary.merge_into`` refuses it (the caller folds its records instead).
    ``None`` in ``session_tokens``, ``span_in_compaction``, ``awaiting_tools`` means "not set by
    this file"; ``status_set`` says the same of ``last_request_status``.
    """

    mergeable: bool
    records: int
    files: int
    turns_total: int
    turns_in_context: int
    last_request_total: int
    session_tokens: TokenCounts | None = None
    last_request_status: StopReason | None = None
    status_set: bool = False
    open_request: bool = False
    open_compaction: tuple[CompactionReason, CompactionMode] | None = None
    span_in_compaction: bool | None = None
    span_usage: bool = False
    span_counted: bool = False
    span_calls: bool = False
    span_texts: list[str] = msgspec.field(default_factory=list)
    compaction_texts: list[str] = msgspec.field(default_factory=list)
    awaiting_tools: bool | None = None
    head: bool = False
    closed: bool = False
    # R-SET-1/5: ``None`` means "not set by this file" (the last settings record wins; the way
    # the last run ended; whether a run was left open).
    settings: SettingsPayload | None = None
    run_end: str | None = None
    run_open: bool | None = None
    runs: int = 0
    runs_unknown_first: bool = False


@dataclass(slots=True)
class SessionState:
    """Session-wide counters (R-PROJ-2).  ``from_records`` is repeated ``apply``.

    Equality compares the public fields only, so a live state equals the state rebuilt from its
    trace (INV-24) regardless of fold scratch.
    """

    turns_total: int = 0
    turns_in_context: int = 0
    session_tokens: TokenCounts = field(default_factory=TokenCounts)
    last_request_total: int = 0
    last_request_status: StopReason | None = None
    open_request: bool = False
    open_compaction: tuple[CompactionReason, CompactionMode] | None = None
    from_compaction: bool = False
    rotation_pending: bool = False
    task_running: bool = False
    files: int = 0
    records: int = 0
    # The latest goal run (R-GOAL-7): folded here so that it spans every file, like the
    # counters, and is rebuilt wherever the session state is.
    goal: GoalState = field(default_factory=GoalState)
    # R-SET-1: the last settings record (``None``: the trace has none, e.g. a reference trace).
    settings: SessionSettings | None = None

    # --- fold scratch (not part of equality) ---------------------------------------------
    # The open request span: began inside a compaction span, recorded a token_usage, has been
    # counted as a turn provisionally, produced a completed tool_call.
    # ``None`` (here and in ``_awaiting_tools``) only in a file summary's fold (``FileFold``):
    # "not set by this file", so that the merge keeps the value of the files before it.
    _span_in_compaction: bool | None = field(default=False, init=False, repr=False, compare=False)
    _span_usage: bool = field(default=False, init=False, repr=False, compare=False)
    _span_counted: bool = field(default=False, init=False, repr=False, compare=False)
    _span_calls: bool = field(default=False, init=False, repr=False, compare=False)
    # Assistant text bodies of the open span (collected only inside compaction spans), and those
    # of the last completed request span of the open compaction span (R-RESUME-15 void check).
    _span_texts: list[str] = field(default_factory=list, init=False, repr=False, compare=False)
    _compaction_texts: list[str] = field(
        default_factory=list, init=False, repr=False, compare=False
    )
    # The last committed turn had tool calls and no abort / max-turns notice came after it.
    _awaiting_tools: bool | None = field(default=False, init=False, repr=False, compare=False)
    # A session_meta after the first, followed by nothing but tool_list_ready so far.
    _head: bool = field(default=False, init=False, repr=False, compare=False)
    # The last record is a completed compaction_end whose closure is not void.
    _closed: bool = field(default=False, init=False, repr=False, compare=False)
    # R-SET-5: how the last ended run ended, and whether a run started and has not ended.
    _run_end: RunEnd | None = field(default=None, init=False, repr=False, compare=False)
    _run_open: bool | None = field(default=False, init=False, repr=False, compare=False)
    _runs: int = field(default=0, init=False, repr=False, compare=False)
    _first_start_unknown: bool | None = field(default=None, init=False, repr=False, compare=False)

    # ------------------------------------------------------------------------- status (R-SET-5)

    @property
    def run_end(self) -> RunEnd | None:
        """How the session's last ended run ended (``None``: no run has ended)."""
        return self._run_end

    @property
    def runs(self) -> int:
        """How many runs (tasks) the records started (R-SET-6: server task ids)."""
        return self._runs

    @property
    def run_open(self) -> bool:
        """A run (or compaction) started and has no end in the records: while its lock is held
        it is running, otherwise it crashed (``interrupted``)."""
        return bool(
            self._run_open
            or self.open_request
            or self.open_compaction is not None
            or self.task_running
        )

    @property
    def status(self) -> SessionStatus:
        """The status from the records alone, for a session whose lock nobody holds."""
        return session_status(self, locked=False)

    def status_given(self, *, locked: bool, activity: TaskActivity | None = None) -> SessionStatus:
        """The one status (R-SET-5): ``locked`` is the lock probe's answer (held by a live
        writer); ``activity`` what a host that runs the session knows of it right now."""
        return session_status(self, locked=locked, activity=activity)

    @classmethod
    def from_records(cls, records: Iterable[OmniMessage]) -> SessionState:
        state = cls()
        for record in records:
            state.apply(record)
        return state

    def apply(self, record: OmniMessage) -> None:
        """Fold one more record.  Origin-tagged and partial messages are not records of this
        session and are ignored (R-PROJ-4, R-TRACE-2)."""
        if record.origin is not None:
            return
        payload = record.payload
        kind = type(payload)
        if kind in _SKIPPED:
            return
        self.records += 1
        # Dispatch on the exact payload type: an isinstance chain costs more than the fold.
        handler = _HANDLERS.get(kind)
        if self._closed or self._head or kind is SessionMetaPayload:
            self._apply_rare(kind, payload, handler)
            return
        # The common case: no closure to clear, no rotation head pending.  The derived flags
        # already match their inputs (every apply leaves them so); only the handlers in
        # ``_DERIVING`` change an input (``open_request``, ``_awaiting_tools``, ``_closed``).
        if handler is not None:
            handler(self, payload)
            if kind in _DERIVING:
                self._derive()

    def _apply_rare(
        self, kind: type[Any], payload: Any, handler: Callable[[SessionState, Any], None] | None
    ) -> None:
        self._closed = False
        if kind is SessionMetaPayload:
            self.files += 1
            if self.files > 1:
                self._head = True
            self._derive()
            return
        if self._head and kind not in _HEAD_KINDS:
            self._head = False
            self._start_new_context()
        if handler is not None:
            handler(self, payload)
        self._derive()

    # ------------------------------------------------------------------------- handlers

    # The goal fold rides on these handlers: it needs its records only while a goal is counting,
    # and otherwise only a round input or a goal_finished (the fold is on resume's hot path).

    def _on_request_begin(self, payload: RequestBeginPayload) -> None:
        if self.goal.counting:
            self.goal.apply_payload(RequestBeginPayload, payload)
        if self.open_request:
            self._end_span(committed=False)  # R-RESUME-5
        if self.open_compaction is None:
            self._start_run()  # a run with an empty prompt starts here
        self.open_request = True
        self._span_in_compaction = self.open_compaction is not None
        self._span_usage = False
        self._span_counted = False
        self._span_calls = False
        self._span_texts = []

    def _on_request_end(self, payload: RequestEndPayload) -> None:
        if self.goal.counting:
            self.goal.apply_payload(RequestEndPayload, payload)
        self.last_request_status = payload.status
        if self.open_request:
            final = (
                payload.status == "completed"
                and not self._span_in_compaction
                and not self._span_calls
            )
            self._end_span(committed=payload.status == "completed")
            if final:
                # A turn without a tool call ends its task (R-RUN-1).
                self._end_run("completed")

    def _on_text(self, payload: TextPayload) -> None:
        if self.goal.counting or payload.text.startswith("[goal]"):
            self.goal.apply_payload(TextPayload, payload)
        if payload.role == "assistant":
            if not self.open_request:
                # Outside any span only the max-turns notice is written (R-MAXT-2).
                self._awaiting_tools = False
                self._end_run("max_turns")
            elif self._span_in_compaction:
                self._span_texts.append(payload.text)
        elif not self.open_request and self.open_compaction is None:
            self._start_run()  # a task's input (prompt, steering, goal round)

    def _on_tool_call(self, payload: ToolCallPayload) -> None:
        if self.open_request and payload.stop_reason in (None, "completed"):
            self._span_calls = True

    def _on_abort(self, payload: AbortPayload) -> None:
        if self.goal.counting:
            self.goal.apply_payload(AbortPayload, payload)
        self._awaiting_tools = False
        self._end_run("aborted" if payload.reason == ABORT_BY_USER else "failed")

    def _on_goal_finished(self, payload: GoalFinishedPayload) -> None:
        self.goal.apply_payload(GoalFinishedPayload, payload)
        self._end_run(_GOAL_ENDS[payload.outcome])

    def _on_image(self, payload: object) -> None:
        if not self.open_request and self.open_compaction is None:
            self._start_run()

    def _on_settings(self, payload: SettingsPayload) -> None:
        self.settings = payload

    def _start_run(self) -> None:
        if self._run_open is not True:
            if self._first_start_unknown is None:
                # Only a file summary's fold starts not knowing (``None``) whether a run is
                # open: the merge takes this start back when one was (R-TRACE-19).
                self._first_start_unknown = self._run_open is None
            self._runs += 1
            self._run_open = True

    def _end_run(self, how: RunEnd) -> None:
        self._run_end = how
        self._run_open = False

    def _on_compaction_begin(self, payload: CompactionBeginPayload) -> None:
        if self.goal.counting:
            self.goal.apply_payload(CompactionBeginPayload, payload)
        self.open_compaction = (payload.reason, payload.mode)
        self._compaction_texts = []

    def _on_token_usage(self, payload: TokenUsagePayload) -> None:
        # R-RESUME-11: both figures are "of the last token_usage"; one found right after a
        # request_end (R-RUN-16) is that request's and is still the last one.
        if self.goal.counting:
            self.goal.apply_payload(TokenUsagePayload, payload)
        self.session_tokens = payload.session
        self.last_request_total = payload.request.total
        if self.open_request:
            self._span_usage = True
            if not self._span_in_compaction and not self._span_counted:
                self._span_counted = True
                self._count_turn(1)

    def _end_span(self, *, committed: bool) -> None:
        """Close the open request span; ``committed`` per G-6 / R-RESUME-7a."""
        if self._span_in_compaction:
            if committed:
                # Moved, not copied: the span's list is dropped right after.
                self._compaction_texts = self._span_texts
        elif committed:
            if not self._span_counted:
                self._count_turn(1)
            self._awaiting_tools = self._span_calls
        elif self._span_counted:
            self._count_turn(-1)
        self.open_request = False
        self._span_counted = False
        self._span_usage = False
        self._span_calls = False
        self._span_texts = []

    def _on_compaction_end(self, payload: CompactionEndPayload) -> None:
        if self.goal.counting:
            self.goal.apply_payload(CompactionEndPayload, payload)
        if self.open_request:
            self._end_span(committed=self._span_usage)  # R-RESUME-15b
        self.open_compaction = None
        texts, self._compaction_texts = self._compaction_texts, []
        if payload.status != "completed":
            return
        # R-RESUME-15: a summarize closure whose last completed request gives no summary is
        # void and resets nothing.  A discard compaction has no summary to lose.
        if payload.mode == "summarize" and not extract_summary("".join(texts)):
            return
        self.turns_in_context = 0
        self.last_request_total = 0
        self._closed = True

    def _start_new_context(self) -> None:
        # The previous file ended here: a span still open ended with its file (R-RESUME-7a:
        # committed iff its token_usage was recorded, which the provisional count reflects).
        if self.open_request:
            self._end_span(committed=self._span_usage)
        self.open_compaction = None
        self._compaction_texts = []
        # R-RESUME-11: per-file figures.
        self.turns_in_context = 0
        self.last_request_total = 0

    # ------------------------------------------------------------------------- file summaries

    @classmethod
    def _for_file_summary(cls) -> SessionState:
        """A fresh state whose carried values read "not set by this file" (``FileFold``)."""
        state = cls()
        state._span_in_compaction = None
        state._awaiting_tools = None
        state._run_open = None
        return state

    def _summary(self, *, mergeable: bool, tokens_set: bool, status_set: bool) -> StateSummary:
        return StateSummary(
            mergeable=mergeable,
            records=self.records,
            files=self.files,
            turns_total=self.turns_total,
            turns_in_context=self.turns_in_context,
            last_request_total=self.last_request_total,
            session_tokens=self.session_tokens if tokens_set else None,
            last_request_status=self.last_request_status,
            status_set=status_set,
            open_request=self.open_request,
            open_compaction=self.open_compaction,
            span_in_compaction=self._span_in_compaction,
            span_usage=self._span_usage,
            span_counted=self._span_counted,
            span_calls=self._span_calls,
            span_texts=list(self._span_texts),
            compaction_texts=list(self._compaction_texts),
            awaiting_tools=self._awaiting_tools,
            head=self._head,
            closed=self._closed,
            settings=self.settings,
            run_end=self._run_end,
            run_open=self._run_open,
            runs=self._runs,
            runs_unknown_first=bool(self._first_start_unknown),
        )

    def _merge_file(self, summary: StateSummary) -> bool:
        """Fold one closed file through its summary (R-TRACE-19): the same state as folding
        its records, fold scratch included, except ``goal``, which ``FileSummary.merge_into``
        merges.  ``False`` (and nothing changed) when the summary
        is not mergeable here; the caller then folds the file's records.

        Why it is exact: the file's ``session_meta`` and first other record start a new context
        (``_start_new_context``, on this state), after which the fold of the file depends on
        the files before it only through the carried values, which the summary says it set or
        not, and the additive counters.
        """
        if not summary.mergeable or (self.files == 0 and self.records > 0):
            return False
        if self.files > 0:
            self._start_new_context()
        self.records += summary.records
        self.files += summary.files
        self.turns_total += summary.turns_total
        self.turns_in_context = summary.turns_in_context
        self.last_request_total = summary.last_request_total
        if summary.session_tokens is not None:
            self.session_tokens = summary.session_tokens
        if summary.status_set:
            self.last_request_status = summary.last_request_status
        self.open_request = summary.open_request
        self.open_compaction = summary.open_compaction
        if summary.span_in_compaction is not None:
            self._span_in_compaction = summary.span_in_compaction
        self._span_usage = summary.span_usage
        self._span_counted = summary.span_counted
        self._span_calls = summary.span_calls
        self._span_texts = list(summary.span_texts)
        self._compaction_texts = list(summary.compaction_texts)
        if summary.awaiting_tools is not None:
            self._awaiting_tools = summary.awaiting_tools
        self._head = summary.head
        self._closed = summary.closed
        if summary.settings is not None:
            self.settings = summary.settings
        if summary.run_end is not None:
            self._run_end = summary.run_end  # type: ignore[assignment]
        # A first run start the file's fold could not tell from a continuation: it was one
        # when a run was already open here.
        self._runs += summary.runs - (1 if summary.runs_unknown_first and self._run_open else 0)
        if summary.runs and self._first_start_unknown is None:
            self._first_start_unknown = False
        if summary.run_open is not None:
            self._run_open = summary.run_open
        self._derive()
        return True

    def _count_turn(self, delta: int) -> None:
        self.turns_total += delta
        self.turns_in_context += delta

    def _derive(self) -> None:
        # R-COMPACT-25 / R-PROJ-2: "file index > 1" is "a session_meta after the first".
        self.from_compaction = self._closed or self.files > 1
        self.rotation_pending = self._closed or self._head
        self.task_running = self.open_request or self._awaiting_tools is True


# Partials are not records (R-TRACE-2); a host's marks (``session_archived``) are records of no
# run and no context: folding them would end a closure or a rotation head (``_apply_rare``).
_PARTIALS: frozenset[type[Any]] = frozenset(PARTIAL_PAYLOAD_TYPES)
_SKIPPED: frozenset[type[Any]] = _PARTIALS | frozenset(HOST_EVENT_TYPES)
_HEAD_KINDS: frozenset[type[Any]] = frozenset(HEAD_EVENT_TYPES)
_GOAL_ENDS: dict[str, RunEnd] = {
    "complete": "goal_complete",
    "blocked": "goal_blocked",
    "budget_limited": "budget_limited",
    "aborted": "aborted",
}
# Payload types whose handler may change an input of ``_derive``.
_DERIVING: frozenset[type[Any]] = frozenset(
    {RequestBeginPayload, RequestEndPayload, TextPayload, AbortPayload, CompactionEndPayload}
)
_HANDLERS: dict[type[Any], Callable[[SessionState, Any], None]] = {
    RequestBeginPayload: SessionState._on_request_begin,
    TokenUsagePayload: SessionState._on_token_usage,
    RequestEndPayload: SessionState._on_request_end,
    TextPayload: SessionState._on_text,
    ToolCallPayload: SessionState._on_tool_call,
    AbortPayload: SessionState._on_abort,
    CompactionBeginPayload: SessionState._on_compaction_begin,
    CompactionEndPayload: SessionState._on_compaction_end,
    GoalFinishedPayload: SessionState._on_goal_finished,
    ImageUrlPayload: SessionState._on_image,
    InlineDataPayload: SessionState._on_image,
    SettingsPayload: SessionState._on_settings,
}
