"""The span tree of a session: runs → turns → requests, tool calls and compactions.

Owns: folding a session's records into nested spans, each with its position (the file and
ordinal of the record that opened it), its start and end times, its status and its tokens; run
boundaries come from ``SessionState`` (the one status projection), so a run here is a run there.
A ``run_subagent`` call is linked to the child session its ``subagent`` pointer names (the
earliest such call still running and without a child, as the engine writes the pointer while the
call runs, R-SUB-3), concurrent calls included.  Does not: read the child's records (the caller
folds the child's own tree and hangs it under the call with ``Span.children``), or count the
model context (``SessionState``/``Usage``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, TypeAlias

from eventstore import (
    AbortPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    SessionMetaPayload,
    SubagentPayload,
    TokenCounts,
    TokenUsagePayload,
    ToolCallOutputPayload,
    ToolCallPayload,
)
from eventstore.builders import is_partial

from ._state import SessionState

__all__ = ["Span", "SpanKind", "SpanTree"]

SpanKind: TypeAlias = Literal["run", "turn", "request", "compaction", "tool_call"]

# The engine's subagent tool (engine.RUN_SUBAGENT; projections sit below the engine).
_RUN_SUBAGENT = "run_subagent"


@dataclass(slots=True, eq=False)
class Span:
    """One span.  ``end``/``status`` are ``None`` while it is open (or when a crash left it
    open).  ``tokens`` is a request's own usage; ``total_tokens()`` adds up what is below."""

    kind: SpanKind
    file: int
    ordinal: int
    start: str
    end: str | None = None
    status: str | None = None
    name: str | None = None
    tool_call_id: str | None = None
    subagent: str | None = None
    tokens: TokenCounts | None = None
    children: list[Span] = field(default_factory=list)

    def total_tokens(self) -> TokenCounts | None:
        """This span's tokens: its own, or the sum of its children's (``None``: none recorded)."""
        if self.tokens is not None:
            return self.tokens
        total: TokenCounts | None = None
        for child in self.children:
            sub = child.total_tokens()
            if sub is not None:
                total = sub if total is None else total + sub
        return total

    def finished(self) -> str | None:
        """When this span ended: its own end, else (a container) its last child's end."""
        if self.end is not None:
            return self.end
        ends = [e for e in (c.finished() for c in self.children) if e is not None]
        return max(ends, key=_epoch_ms) if ends else None

    def latency_ms(self) -> float | None:
        end = self.finished()
        if end is None:
            return None
        return max(0.0, _epoch_ms(end) - _epoch_ms(self.start))

    def walk(self) -> Iterator[Span]:
        yield self
        for child in self.children:
            yield from child.walk()


def _epoch_ms(timestamp: str) -> float:
    try:
        return datetime.fromisoformat(timestamp).timestamp() * 1000.0
    except ValueError:
        return 0.0  # the validator reports a bad timestamp (V-19); the tree stays drawable


@dataclass(slots=True)
class SpanTree:
    """The fold.  ``apply(record, file, ordinal)`` with the record's position, or
    ``from_records`` (positions counted: files by ``session_meta``, ordinals from 0)."""

    roots: list[Span] = field(default_factory=list)

    # --- fold scratch -----------------------------------------------------------------------
    _state: SessionState = field(default_factory=SessionState, repr=False)
    _run: Span | None = field(default=None, repr=False)
    _turn: Span | None = field(default=None, repr=False)
    _turn_done: bool = field(default=False, repr=False)
    _request: Span | None = field(default=None, repr=False)
    _just_ended: Span | None = field(default=None, repr=False)
    _compaction: Span | None = field(default=None, repr=False)
    _calls: dict[str, Span] = field(default_factory=dict, repr=False)
    # run_subagent calls still running and without a child, in call order.
    _waiting: dict[str, Span] = field(default_factory=dict, repr=False)

    @classmethod
    def from_records(cls, records: Iterable[OmniMessage]) -> SpanTree:
        tree = cls()
        file, ordinal = 0, 0
        for record in records:
            if isinstance(record.payload, SessionMetaPayload) and record.origin is None:
                file, ordinal = file + 1, 0
            tree.apply(record, max(file, 1), ordinal)
            ordinal += 1
        return tree

    def apply(self, record: OmniMessage, file: int, ordinal: int) -> None:
        """Fold one record; origin-tagged and partial messages are not this session's."""
        if record.origin is not None or is_partial(record):
            return
        state = self._state
        runs_before = state.runs
        state.apply(record)
        p = record.payload
        at = record.timestamp
        just_ended, self._just_ended = self._just_ended, None
        if state.runs > runs_before:
            self._close_run(at, "interrupted")  # a run left open (a crash) before this one
            self._run = Span("run", file, ordinal, at)
            self.roots.append(self._run)
        if isinstance(p, RequestBeginPayload):
            self._on_request_begin(file, ordinal, at)
        elif isinstance(p, TokenUsagePayload):
            target = self._request or just_ended
            if target is not None:
                target.tokens = p.request
        elif isinstance(p, RequestEndPayload):
            if self._request is not None:
                self._request.end, self._request.status = at, p.status
                if self._turn is not None and self._request in self._turn.children:
                    self._turn.status = p.status
                    self._turn_done = p.status == "completed"
                self._just_ended, self._request = self._request, None
        elif isinstance(p, ToolCallPayload):
            self._on_tool_call(p, file, ordinal, at)
        elif isinstance(p, ToolCallOutputPayload):
            call = self._calls.pop(p.tool_call_id, None)
            self._waiting.pop(p.tool_call_id, None)
            if call is not None:
                call.end, call.status = at, p.stop_reason
        elif isinstance(p, SubagentPayload) and self._waiting:
            call_id = next(iter(self._waiting))
            self._waiting.pop(call_id).subagent = p.session_id
        elif isinstance(p, CompactionBeginPayload):
            self._compaction = Span(
                "compaction", file, ordinal, at, name=f"{p.reason} {p.mode}".strip()
            )
            (self._run.children if self._run is not None else self.roots).append(self._compaction)
        elif isinstance(p, CompactionEndPayload):
            if self._compaction is not None:
                self._close_request(at, p.status)
                self._compaction.end, self._compaction.status = at, p.status
                self._compaction = None
        elif isinstance(p, AbortPayload):
            self._close_request(at, "aborted")
            for call in self._calls.values():
                call.end, call.status = at, "aborted"
            self._calls.clear()
            self._waiting.clear()
        elif isinstance(p, SessionMetaPayload) and file > 1:
            # A new file: a request left open by the previous one ended with it.
            self._close_request(None, None)
        if self._run is not None and not state.run_open:
            self._close_run(at, state.run_end)

    def _on_request_begin(self, file: int, ordinal: int, at: str) -> None:
        self._close_request(None, None)  # a request left open by a crash (R-RESUME-5)
        request = Span("request", file, ordinal, at)
        if self._compaction is not None:
            self._compaction.children.append(request)
        else:
            if self._turn is None or self._turn_done:
                self._turn = Span("turn", file, ordinal, at)
                self._turn_done = False
                (self._run.children if self._run is not None else self.roots).append(self._turn)
            self._turn.children.append(request)
        self._request = request

    def _on_tool_call(self, p: ToolCallPayload, file: int, ordinal: int, at: str) -> None:
        if p.stop_reason not in (None, "completed") or self._turn is None:
            return
        call = Span("tool_call", file, ordinal, at, name=p.name, tool_call_id=p.tool_call_id)
        self._turn.children.append(call)
        self._calls[p.tool_call_id] = call
        if p.name == _RUN_SUBAGENT:
            self._waiting[p.tool_call_id] = call

    def _close_request(self, at: str | None, status: str | None) -> None:
        if self._request is not None:
            self._request.end, self._request.status = at, status
            self._request = None

    def _close_run(self, at: str, how: str | None) -> None:
        run = self._run
        if run is None:
            return
        if how == "interrupted":
            run.status = how  # its end is its last child's (``finished``)
        elif how is not None:
            run.end, run.status = at, how
        self._run = self._turn = None
        self._turn_done = False
