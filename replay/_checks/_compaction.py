"""Owns: compaction spans — ``compaction_begin``/``compaction_end`` pair up and match (V-5); the
end's ``attempt`` counts its span's requests (V-12, INV-23, R-COMPACT-24); a completed end is the
last record of its file and holds a usable summary (V-6, R-RESUME-15).  Does not: judge the
requests inside the span (``spans``, ``retries``)."""

from __future__ import annotations

from typing import Any, ClassVar

from eventstore import (
    CompactionBeginPayload,
    CompactionEndPayload,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    TextPayload,
)
from projections import markers as mk

from ._core import CheckGroup, FileFacts, Handler


class CompactionChecks(CheckGroup):
    name = "compaction"

    def __init__(self, facts: FileFacts) -> None:
        super().__init__(facts)
        self.reason = ""
        self.mode = ""
        self.requests = 0
        # The assistant texts of the open request and of the last completed one (the summary).
        self.span_texts: list[str] = []
        self.last_completed_texts: list[str] = []
        self.closed_end_line: int | None = None
        self.closed_end_void = False

    def before(self, line: int, msg: OmniMessage, kind: str) -> bool:
        # V-6: nothing may follow a completed compaction_end in its file.
        if self.closed_end_line is not None:
            if not self.closed_end_void:
                self.facts.error(
                    self.closed_end_line,
                    "V-6",
                    f"completed compaction_end is not the last record of its file "
                    f"({kind} follows at line {line})",
                )
            self.closed_end_line = None
        return True

    def _on_text(self, line: int, payload: TextPayload) -> None:
        if payload.role == "assistant" and self.facts.req_line is not None:
            self.span_texts.append(payload.text)

    def _on_request_begin(self, line: int, payload: RequestBeginPayload) -> None:
        if self.facts.comp_line is not None:
            self.requests += 1
        self.span_texts = []

    def _on_request_end(self, line: int, payload: RequestEndPayload) -> None:
        if self.facts.req_line is None:
            return
        if payload.status == "completed":
            self.last_completed_texts = self.span_texts
        self.span_texts = []

    def _on_begin(self, line: int, payload: CompactionBeginPayload) -> None:
        facts = self.facts
        if facts.comp_line is not None:
            facts.error(
                line, "V-5", f"compaction_begin inside the compaction of line {facts.comp_line}"
            )
        if facts.req_line is not None:
            facts.error(
                line, "V-5", f"compaction_begin inside the request of line {facts.req_line}"
            )
        self.reason, self.mode = payload.reason, payload.mode
        self.requests = 0

    def _on_end(self, line: int, payload: CompactionEndPayload) -> None:
        facts = self.facts
        if facts.comp_line is None:
            facts.error(line, "V-5", "compaction_end without an open compaction")
            return
        if facts.req_line is not None:
            facts.error(
                line, "V-5", f"compaction_end while the request of line {facts.req_line} is open"
            )
        if (payload.reason, payload.mode) != (self.reason, self.mode):
            facts.error(
                line,
                "V-5",
                f"compaction_end {payload.reason}/{payload.mode} does not match its begin "
                f"{self.reason}/{self.mode} (line {facts.comp_line})",
            )
        expected = self.requests or None
        if payload.attempt != expected:
            facts.warn(
                line,
                "V-12",
                f"compaction_end attempt {payload.attempt}, but its span holds "
                f"{self.requests} request(s)",
            )
        if payload.status == "completed":
            void = payload.mode == "summarize" and not mk.extract_summary(
                "".join(self.last_completed_texts)
            )
            if void:
                facts.warn(
                    line,
                    "V-6",
                    "completed compaction_end whose last completed request holds no usable "
                    "summary (void closure, R-RESUME-15)",
                )
            self.closed_end_line, self.closed_end_void = line, void

    handlers: ClassVar[dict[type[Any], Handler]] = {
        TextPayload: _on_text,
        RequestBeginPayload: _on_request_begin,
        RequestEndPayload: _on_request_end,
        CompactionBeginPayload: _on_begin,
        CompactionEndPayload: _on_end,
    }

    def finish(self) -> None:
        if self.facts.comp_line is not None:
            self.facts.warn(
                self.facts.comp_line, "V-5", "compaction still open at end of file (crash)"
            )
