"""Owns: attempts and retry stamps (V-12) and what may come between a retry-stamped failure and
its retry (V-13).  Does not: pair request spans (``spans``).

V-12: the validator cannot know the ``RetryPolicy``.  It checks ``attempt`` exactly (the k-th
request of a turn, or of a compaction span, carries ``attempt: k``, except a first-try
completion, which carries none); ``retry_in_ms`` only on a retryable status and never on a
completion; a retryable failure that *was* retried carries ``retry_in_ms``; and the values of one
turn follow the shape of ``min(base·2^(k−1), cap)`` for unknown base and cap: never negative,
never decreasing, at most doubling per attempt, and constant once they stop doubling (the cap).
(``compaction_end.attempt`` against its span's requests is the ``compaction`` group's.)
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from engine import RETRYABLE_STATUSES
from eventstore import (
    AbortPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    SessionMetaPayload,
    TokenUsagePayload,
    ToolCallOutputPayload,
    UnknownPayload,
)

from ._core import CheckGroup, FileFacts, Handler

_RETRYABLE: Final = RETRYABLE_STATUSES


class RetryChecks(CheckGroup):
    name = "retries"

    def __init__(self, facts: FileFacts) -> None:
        super().__init__(facts)
        self.attempt_k = 0
        self.comp_requests = 0
        self.retry_pending = False
        self.missing_retry_line: int | None = None
        self.ladder_prev: tuple[int, int] | None = None
        self.ladder_capped = False
        self.await_retry_line: int | None = None

    def before(self, line: int, msg: OmniMessage, kind: str) -> bool:
        payload = msg.payload
        if self.await_retry_line is None or isinstance(
            payload, UnknownPayload | SessionMetaPayload
        ):
            return True
        # V-13: after a retry-stamped failure only its tool outputs (and a late token_usage,
        # judged by V-11) may come before the retry, an abort or the span's compaction_end.
        if isinstance(payload, ToolCallOutputPayload | TokenUsagePayload):
            return True
        ok = isinstance(payload, RequestBeginPayload | AbortPayload) or (
            isinstance(payload, CompactionEndPayload) and self.facts.comp_line is not None
        )
        if not ok:
            self.facts.warn(
                self.await_retry_line,
                "V-13",
                f"request_end with retry_in_ms is followed by {kind} (line {line}), "
                "not by a retry, an abort or the end of the file",
            )
        self.await_retry_line = None
        return True

    def run_starts(self) -> None:
        """A failed attempt before a new run was not retried (R-RESUME-7b)."""
        if self.facts.comp_line is None:
            self.retry_pending = False
            self.missing_retry_line = None

    def _reset_ladder(self) -> None:
        self.ladder_prev = None
        self.ladder_capped = False

    def _on_request_begin(self, line: int, payload: RequestBeginPayload) -> None:
        # Which attempt of which turn (or compaction) this request is.
        if self.facts.comp_line is not None:
            self.attempt_k = self.comp_requests + 1
            self.comp_requests += 1
            if self.attempt_k == 1:
                self._reset_ladder()
        elif self.retry_pending:
            self.attempt_k += 1
        else:
            self.attempt_k = 1
            self._reset_ladder()
        if self.missing_retry_line is not None and self.attempt_k > 1:
            self.facts.warn(
                self.missing_retry_line,
                "V-12",
                "failed request_end without retry_in_ms was retried",
            )
        self.missing_retry_line = None
        self.retry_pending = False

    def _on_request_end(self, line: int, payload: RequestEndPayload) -> None:
        if self.facts.req_line is None:
            return  # not a request's end (V-4)
        self._check_stamps(line, payload)
        if payload.status != "completed" and self.facts.comp_line is None:
            self.retry_pending = True

    def _check_stamps(self, line: int, payload: RequestEndPayload) -> None:
        warn = self.facts.warn
        status, attempt, retry = payload.status, payload.attempt, payload.retry_in_ms
        k = self.attempt_k
        unit = "compaction span" if self.facts.comp_line is not None else "turn"
        expected = None if k == 1 and status == "completed" else k
        if attempt != expected:
            if expected is None:
                warn(line, "V-12", f"attempt {attempt} on a first-try completion")
            elif attempt is None:
                warn(line, "V-12", f"attempt missing (attempt {k} of this {unit})")
            else:
                warn(line, "V-12", f"attempt {attempt}, expected {k} ({unit} attempt {k})")
        if retry is None:
            if status in _RETRYABLE:
                self.missing_retry_line = line
            return
        if status not in _RETRYABLE:
            warn(line, "V-12", f"retry_in_ms on a request_end with status {status}")
            return
        self.await_retry_line = line
        if retry < 0:
            warn(line, "V-12", f"negative retry_in_ms {retry}")
            return
        prev = self.ladder_prev
        self.ladder_prev = (k, retry)
        if prev is None:
            return
        pk, pv = prev
        steps = max(k - pk, 0)
        doubled = pv << min(steps, 64)
        if retry < pv:
            warn(line, "V-12", f"retry_in_ms {retry} is less than the previous {pv}")
        elif self.ladder_capped and retry != pv:
            warn(line, "V-12", f"retry_in_ms {retry} changed after reaching its cap {pv}")
        elif retry > doubled:
            warn(
                line,
                "V-12",
                f"retry_in_ms {retry} grows faster than the backoff ladder (previous {pv})",
            )
        elif retry < doubled:
            self.ladder_capped = True

    def _on_abort(self, line: int, payload: AbortPayload) -> None:
        self.retry_pending = False
        self.missing_retry_line = None

    def _on_compaction_begin(self, line: int, payload: CompactionBeginPayload) -> None:
        self.retry_pending = False
        self.missing_retry_line = None
        self.comp_requests = 0

    def _on_compaction_end(self, line: int, payload: CompactionEndPayload) -> None:
        if self.facts.comp_line is not None:
            self.missing_retry_line = None

    handlers: ClassVar[dict[type[Any], Handler]] = {
        RequestBeginPayload: _on_request_begin,
        RequestEndPayload: _on_request_end,
        AbortPayload: _on_abort,
        CompactionBeginPayload: _on_compaction_begin,
        CompactionEndPayload: _on_compaction_end,
    }
