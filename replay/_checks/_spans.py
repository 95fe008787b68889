"""Owns: request spans and runs — ``request_begin``/``request_end`` pair up (V-4); one
``token_usage`` per request (V-11); an ``abort`` ends its run: what follows starts a new run or a
manual compaction, or closes the span an R-TRACE-15a abort was written in (V-14).  Does not:
judge attempts and retry stamps (``retries``) or compaction spans (``compaction``)."""

from __future__ import annotations

from typing import Any, ClassVar

from eventstore import (
    AbortPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    ImageUrlPayload,
    InlineDataPayload,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    SessionMetaPayload,
    SettingsPayload,
    TextPayload,
    TokenCounts,
    TokenUsagePayload,
    ToolListReadyPayload,
    UnknownPayload,
)

from ._core import CheckGroup, FileFacts, Handler


class SpanChecks(CheckGroup):
    name = "spans"

    def __init__(self, facts: FileFacts) -> None:
        super().__init__(facts)
        self.span_usage = 0
        self.last_end_line = 0
        self.last_end_usage = 0
        self.abort_line: int | None = None
        self.abort_in_req = False
        self.abort_in_comp = False

    def before(self, line: int, msg: OmniMessage, kind: str) -> bool:
        payload = msg.payload
        if self.abort_line is None or isinstance(payload, UnknownPayload | SessionMetaPayload):
            return True
        # V-14: an abort ends its run; what follows starts a new run or a manual compaction, or
        # closes the span an R-TRACE-15a abort was written in.
        ok = (
            isinstance(payload, TextPayload | ImageUrlPayload | InlineDataPayload)
            and payload.role == "user"
        ) or isinstance(payload, ToolListReadyPayload | RequestBeginPayload | SettingsPayload)
        if isinstance(payload, CompactionBeginPayload):
            ok = not self.abort_in_comp and not self.abort_in_req
        if isinstance(payload, RequestEndPayload):
            ok = self.abort_in_req
        elif isinstance(payload, CompactionEndPayload):
            ok = self.abort_in_comp and not self.abort_in_req
        if not ok:
            self.facts.warn(
                self.abort_line,
                "V-14",
                f"abort is followed by {kind} (line {line}), not by the start of a new run",
            )
        self.abort_line = None
        return True

    def _on_request_begin(self, line: int, payload: RequestBeginPayload) -> None:
        if self.facts.req_line is not None:
            self.facts.error(
                line,
                "V-4",
                f"request_begin while the request of line {self.facts.req_line} is open",
            )
        self.span_usage = 0

    def _on_request_end(self, line: int, payload: RequestEndPayload) -> None:
        if self.facts.req_line is None:
            self.facts.error(line, "V-4", "request_end without an open request")
            return
        self.last_end_line, self.last_end_usage = line, self.span_usage

    def _on_token_usage(self, line: int, payload: TokenUsagePayload) -> None:
        facts = self.facts
        if facts.req_line is not None:
            self.span_usage += 1
            if self.span_usage > 1:
                facts.error(
                    line, "V-11", f"second token_usage in the request of line {facts.req_line}"
                )
        elif facts.prev_kind == "request_end" and facts.prev_line == self.last_end_line:
            self.last_end_usage += 1
            if self.last_end_usage > 1:
                facts.error(line, "V-11", "second token_usage for the request just ended")
        else:
            facts.warn(line, "V-11", "token_usage outside a request span")
        for name, counts in (("session", payload.session), ("request", payload.request)):
            problem = _counts_problem(counts)
            if problem:
                facts.warn(line, "V-11", f"token_usage.{name}: {problem}")

    def _on_abort(self, line: int, payload: AbortPayload) -> None:
        self.abort_line = line
        self.abort_in_req = self.facts.req_line is not None
        self.abort_in_comp = self.facts.comp_line is not None

    handlers: ClassVar[dict[type[Any], Handler]] = {
        RequestBeginPayload: _on_request_begin,
        RequestEndPayload: _on_request_end,
        TokenUsagePayload: _on_token_usage,
        AbortPayload: _on_abort,
    }

    def finish(self) -> None:
        if self.facts.req_line is not None:
            self.facts.warn(self.facts.req_line, "V-4", "request still open at end of file (crash)")


def _counts_problem(counts: TokenCounts) -> str:
    values = (counts.cache_read, counts.cache_write, counts.output, counts.total)
    if any(v < 0 for v in values):
        return f"negative count in {values}"
    parts = counts.cache_read + counts.cache_write + counts.output
    if counts.total != parts:
        return f"total {counts.total} is not cache_read + cache_write + output = {parts}"
    return ""
