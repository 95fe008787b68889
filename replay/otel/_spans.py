"""A session's records as OpenTelemetry spans, following the GenAI semantic conventions.

Owns: the mapping, record by record, as the records arrive (the same code exports a finished
trace and a live session): a span ``invoke_agent`` per run (a task: from its prompt to its
end, as ``projections.SessionState`` decides it), ``chat {model}`` per model request
(``request_begin`` .. ``request_end``, with the token counts of its ``token_usage`` and the
provider and model of the session), ``execute_tool {name}`` per tool call (the ``tool_call``
record .. its ``tool_call_output``), and ``compaction`` per compaction; a subagent's session
nested under the tool call that ran it.  Every start and end time is a record's timestamp,
never the clock.  Does not: choose an exporter or send anything (``_export``).

Token counts (R-MSG-17): ``cache_read`` is cached input, ``cache_write`` uncached input, so
``gen_ai.usage.input_tokens`` is their sum and ``gen_ai.usage.cache_read.input_tokens`` the
first; ``gen_ai.usage.output_tokens`` is ``output``.
"""

from __future__ import annotations

import calendar
import datetime as dt
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from eventstore import (
    AbortPayload,
    ApprovalDecisionPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    SessionMetaPayload,
    SubagentPayload,
    TokenUsagePayload,
    ToolCallOutputPayload,
    ToolCallPayload,
    read_trace,
)
from projections import SessionState

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

__all__ = ["SessionSpans", "timestamp_ns"]

AGENT_NAME: Final = "penguin"
#: How deep subagents of subagents are followed (a trace naming itself is not followed).
MAX_DEPTH: Final = 8

SubagentFiles = Callable[[str], Sequence[Path]]


def timestamp_ns(timestamp: str) -> int | None:
    """A record's ISO 8601 timestamp in nanoseconds since the epoch (``None``: not one)."""
    try:
        t = dt.datetime.fromisoformat(timestamp)
    except (TypeError, ValueError):
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    t = t.astimezone(dt.UTC)
    return calendar.timegm(t.timetuple()) * 1_000_000_000 + t.microsecond * 1000


class SessionSpans:
    """Feed one session's records in trace order (``feed``), then ``close``.  Spans start and
    end on ``tracer`` as their records arrive; ``parent`` nests the whole session (a
    subagent's) under another span.  ``subagent_files(session_id)`` finds a subagent's trace
    files when the tool call that ran it ends (none: its spans are left out)."""

    def __init__(
        self,
        tracer: Tracer,
        *,
        parent: Context | None = None,
        subagent_files: SubagentFiles | None = None,
        depth: int = 0,
        seen: frozenset[str] = frozenset(),
    ) -> None:
        self._tracer = tracer
        self._parent = parent
        self._subagent_files = subagent_files
        self._depth = depth
        self._seen = seen
        self._state = SessionState()
        self._session_id: str | None = None
        self._provider: str | None = None
        self._model: str | None = None
        self._last_ns: int | None = None
        self._run: Span | None = None
        self._request: Span | None = None
        # A request that ended: its token_usage may still come, right after (R-USAGE-2).
        self._ended: tuple[Span, int] | None = None
        self._compaction: Span | None = None
        self._tools: dict[str, Span] = {}
        self._tool_names: dict[str, str] = {}
        self._children: dict[str, list[str]] = {}
        #: How many spans this session (and its subagents) started.
        self.spans = 0

    # ------------------------------------------------------------------------------ feeding

    def feed(self, record: OmniMessage) -> None:
        ns = timestamp_ns(record.timestamp)
        if ns is None:
            ns = self._last_ns  # a bad timestamp (V-19): the previous record's time
        if ns is None:
            ns = 0
        self._last_ns = ns
        payload = record.payload
        if self._ended is not None and not isinstance(payload, TokenUsagePayload):
            self._end_request(*self._ended)
        runs, was_open = self._state.runs, self._run is not None
        self._state.apply(record)
        if record.origin is not None:
            return  # another session's record (R-PROJ-4): not a span of this one
        if self._state.runs > runs:
            if was_open:
                self._end_run(ns)
            self._start_run(ns)
        if isinstance(payload, SessionMetaPayload):
            self._session_id = self._session_id or payload.session_id
            self._provider, self._model = payload.provider, payload.model_id
        elif isinstance(payload, RequestBeginPayload):
            self._begin_request(ns)
        elif isinstance(payload, RequestEndPayload):
            self._request_end(payload, ns)
        elif isinstance(payload, TokenUsagePayload):
            self._usage(payload)
        elif isinstance(payload, ToolCallPayload):
            self._tool_call(payload, ns)
        elif isinstance(payload, ApprovalDecisionPayload):
            span = self._tools.get(payload.tool_call_id)
            if span is not None:
                span.set_attribute("penguin.approval.decision", payload.decision)
        elif isinstance(payload, ToolCallOutputPayload):
            self._tool_output(payload, ns)
        elif isinstance(payload, SubagentPayload):
            self._subagent(payload.session_id)
        elif isinstance(payload, CompactionBeginPayload):
            self._compaction_begin(payload, ns)
        elif isinstance(payload, CompactionEndPayload):
            self._compaction_end(payload, ns)
        elif isinstance(payload, AbortPayload) and self._run is not None:
            self._run.add_event("abort", {"reason": payload.reason or ""}, timestamp=ns)
        if self._run is not None and not self._state.run_open:
            self._end_run(ns)

    def close(self) -> None:
        """End what the records left open, at the last record's time (a session still
        running, or one that crashed): those spans say ``penguin.unfinished``."""
        ns = self._last_ns or 0
        if self._ended is not None:
            self._end_request(*self._ended)
        for span in (*self._tools.values(), self._request, self._compaction, self._run):
            if span is not None:
                span.set_attribute("penguin.unfinished", True)
                span.end(end_time=ns)
        self._tools.clear()
        self._request = self._compaction = self._run = None

    # ----------------------------------------------------------------------------- helpers

    def _context(self) -> Context | None:
        from opentelemetry import trace

        for span in (self._compaction, self._run):
            if span is not None:
                return trace.set_span_in_context(span)
        return self._parent

    def _start(
        self, name: str, ns: int, attributes: dict[str, Any], parent: Context | None = None
    ) -> Span:
        from opentelemetry.trace import SpanKind

        base: dict[str, Any] = {"gen_ai.conversation.id": self._session_id or ""}
        if self._session_id:
            base["session.id"] = self._session_id
        span = self._tracer.start_span(
            name,
            context=parent if parent is not None else self._context(),
            kind=SpanKind.CLIENT if name.startswith("chat") else SpanKind.INTERNAL,
            attributes={**base, **attributes},
            start_time=ns,
        )
        self.spans += 1
        return span

    def _error(self, span: Span, what: str, message: str | None = None) -> None:
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", what)
        span.set_status(Status(StatusCode.ERROR, message or what))

    def _start_run(self, ns: int) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT_NAME,
            "penguin.run": self._state.runs,
        }
        if self._provider:
            attributes["gen_ai.provider.name"] = self._provider
        if self._model:
            attributes["gen_ai.request.model"] = self._model
        self._run = None  # a run span is never its own parent
        self._run = self._start(f"invoke_agent {AGENT_NAME}", ns, attributes)

    def _end_run(self, ns: int) -> None:
        run, self._run = self._run, None
        if run is None:
            return
        how = self._state.run_end
        if how is not None:
            run.set_attribute("penguin.run.end", how)
            if how == "failed":
                self._error(run, "failed")
        run.end(end_time=ns)

    def _begin_request(self, ns: int) -> None:
        if self._request is not None:  # a request_begin inside an open span: a new one
            self._request.set_attribute("penguin.unfinished", True)
            self._request.end(end_time=ns)
        model = self._model or ""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "penguin.request.kind": "compaction" if self._compaction is not None else "turn",
        }
        if self._provider:
            attributes["gen_ai.provider.name"] = self._provider
        self._request = self._start(f"chat {model}".rstrip(), ns, attributes)

    def _request_end(self, payload: RequestEndPayload, ns: int) -> None:
        span, self._request = self._request, None
        if span is None:  # a request_end without its begin: a span of no duration
            model = self._model or ""
            span = self._start(f"chat {model}".rstrip(), ns, {"gen_ai.operation.name": "chat"})
        span.set_attribute("penguin.request.status", payload.status)
        if payload.attempt is not None:
            span.set_attribute("penguin.request.attempt", payload.attempt)
        if payload.retry_in_ms is not None:
            span.set_attribute("penguin.request.retry_in_ms", payload.retry_in_ms)
        if payload.status != "completed":
            self._error(span, payload.status, payload.error_message)
        self._ended = (span, ns)

    def _usage(self, payload: TokenUsagePayload) -> None:
        span = self._request if self._request is not None else None
        if span is None and self._ended is not None:
            span = self._ended[0]
        if span is None:
            return
        c = payload.request
        span.set_attribute("gen_ai.usage.input_tokens", c.cache_read + c.cache_write)
        span.set_attribute("gen_ai.usage.output_tokens", c.output)
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", c.cache_read)
        if self._ended is not None and span is self._ended[0]:
            self._end_request(*self._ended)

    def _end_request(self, span: Span, ns: int) -> None:
        self._ended = None
        span.end(end_time=ns)

    def _tool_call(self, payload: ToolCallPayload, ns: int) -> None:
        if payload.stop_reason not in (None, "completed"):
            return  # R-MSG-15: a tool call cut short is not a call
        from opentelemetry import trace

        parent = trace.set_span_in_context(self._run) if self._run is not None else self._parent
        self._tools[payload.tool_call_id] = self._start(
            f"execute_tool {payload.name}",
            ns,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": payload.name,
                "gen_ai.tool.call.id": payload.tool_call_id,
                "gen_ai.tool.type": "function",
            },
            parent,
        )
        self._tool_names[payload.tool_call_id] = payload.name

    def _tool_output(self, payload: ToolCallOutputPayload, ns: int) -> None:
        span = self._tools.pop(payload.tool_call_id, None)
        if span is None:
            return
        status = payload.stop_reason or "completed"
        span.set_attribute("penguin.tool.status", status)
        if status != "completed":
            self._error(span, status)
        for child in self._children.pop(payload.tool_call_id, []):
            self._export_child(child, span)
        span.end(end_time=ns)

    def _subagent(self, child: str) -> None:
        """The subagent belongs to the earliest open tool call that has no subagent yet (the
        ``subagent`` record names no call)."""
        for call_id in self._tools:
            if call_id not in self._children:
                self._children[call_id] = [child]
                return
        if self._tools:
            self._children[next(reversed(self._tools))].append(child)

    def _export_child(self, child: str, span: Span) -> None:
        if self._subagent_files is None or self._depth >= MAX_DEPTH or child in self._seen:
            return
        files = self._subagent_files(child)
        if not files:
            return
        from opentelemetry import trace

        nested = SessionSpans(
            self._tracer,
            parent=trace.set_span_in_context(span),
            subagent_files=self._subagent_files,
            depth=self._depth + 1,
            seen=self._seen | {self._session_id or "", child},
        )
        for record in read_trace(files, report=False).records:
            nested.feed(record)
        nested.close()
        self.spans += nested.spans

    def _compaction_begin(self, payload: CompactionBeginPayload, ns: int) -> None:
        if self._compaction is not None:
            self._compaction.end(end_time=ns)
        self._compaction = self._start(
            "compaction",
            ns,
            {"penguin.compaction.reason": payload.reason, "penguin.compaction.mode": payload.mode},
        )

    def _compaction_end(self, payload: CompactionEndPayload, ns: int) -> None:
        span, self._compaction = self._compaction, None
        if span is None:
            return
        span.set_attribute("penguin.compaction.status", payload.status)
        if payload.status != "completed":
            self._error(span, payload.status, payload.error_message)
        span.end(end_time=ns)
