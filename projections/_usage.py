"""The ``Usage`` projection (SPEC R-USAGE-1..3, R-PROJ-4).

Owns: one row per request span (turn or compaction) with its terminal detail and token counts,
the error rows (failed requests, failed compactions, aborts), the session totals and a few
counters, folded incrementally in O(1) per record.  Does not: price tokens, know the model
context or the session flags (``SessionState``), or read files.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Literal, TypeAlias

from eventstore import (
    AbortPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    SessionMetaPayload,
    StopReason,
    TokenCounts,
    TokenUsagePayload,
)
from eventstore.builders import is_partial

__all__ = ["ErrorKind", "ErrorRow", "RowKind", "Usage", "UsageRow"]

RowKind: TypeAlias = Literal["turn", "compaction"]
ErrorKind: TypeAlias = Literal["turn", "compaction", "compaction_failed", "abort"]


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One request span (R-USAGE-1).

    ``status``/``end`` are ``None`` while the span is open (or when a crash left it open);
    ``request`` is ``None`` when the span recorded no ``token_usage``; ``begin`` is ``None`` for a
    ``request_end`` whose ``request_begin`` was lost.  ``file_index`` is 1-based, counted by
    ``session_meta`` records.
    """

    file_index: int
    kind: RowKind
    status: StopReason | None = None
    attempt: int | None = None
    error_message: str | None = None
    retry_in_ms: int | None = None
    request: TokenCounts | None = None
    begin: str | None = None
    end: str | None = None


@dataclass(frozen=True, slots=True)
class ErrorRow:
    """One error (R-USAGE-3).

    ``kind`` is the failed request's kind (``turn`` / ``compaction``) for a non-completed
    ``request_end``, ``compaction_failed`` for a ``compaction_end{failed}`` and ``abort`` for an
    ``abort`` (whose ``reason`` is kept).  ``timestamp`` is the record's.
    """

    file_index: int
    kind: ErrorKind
    timestamp: str
    status: StopReason | None = None
    error_message: str | None = None
    attempt: int | None = None
    retry_in_ms: int | None = None
    reason: str | None = None


@dataclass(slots=True)
class Usage:
    """Per-request usage (R-USAGE-1..3).  ``from_records`` is repeated ``apply``; equality
    compares the public fields only."""

    rows: list[UsageRow] = field(default_factory=list)
    errors: list[ErrorRow] = field(default_factory=list)
    totals: TokenCounts = field(default_factory=TokenCounts)
    compactions_completed: int = 0
    compactions_failed: int = 0
    compactions_aborted: int = 0
    retries: int = 0

    # --- fold scratch (not part of equality) ---------------------------------------------
    _file_index: int = field(default=0, init=False, repr=False, compare=False)
    _in_compaction: bool = field(default=False, init=False, repr=False, compare=False)
    # Index in ``rows`` of the open span, and of the span whose request_end is the previous
    # record (R-RUN-16: a token_usage right after a request_end belongs to that request).
    _open: int | None = field(default=None, init=False, repr=False, compare=False)
    _just_ended: int | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def from_records(cls, records: Iterable[OmniMessage]) -> Usage:
        usage = cls()
        for record in records:
            usage.apply(record)
        return usage

    def apply(self, record: OmniMessage) -> None:
        """Fold one more record; origin-tagged and partial messages are ignored (R-PROJ-4)."""
        if record.origin is not None or is_partial(record):
            return
        just_ended, self._just_ended = self._just_ended, None
        payload = record.payload

        if isinstance(payload, SessionMetaPayload):
            self._file_index += 1
            # A span left open by its file never ends (the crash residue keeps status None).
            self._open = None
            self._in_compaction = False
        elif isinstance(payload, RequestBeginPayload):
            self.rows.append(
                UsageRow(
                    file_index=self._file_no(),
                    kind="compaction" if self._in_compaction else "turn",
                    begin=record.timestamp,
                )
            )
            self._open = len(self.rows) - 1
        elif isinstance(payload, TokenUsagePayload):
            self.totals = payload.session  # R-USAGE-2
            target = self._open if self._open is not None else just_ended
            if target is not None:
                self.rows[target] = replace(self.rows[target], request=payload.request)
        elif isinstance(payload, RequestEndPayload):
            self._on_request_end(record.timestamp, payload)
        elif isinstance(payload, CompactionBeginPayload):
            self._in_compaction = True
        elif isinstance(payload, CompactionEndPayload):
            self._in_compaction = False
            if payload.status == "completed":
                self.compactions_completed += 1
            elif payload.status == "aborted":
                self.compactions_aborted += 1
            elif payload.status == "failed":
                self.compactions_failed += 1
                self.errors.append(
                    ErrorRow(
                        file_index=self._file_no(),
                        kind="compaction_failed",
                        timestamp=record.timestamp,
                        status=payload.status,
                        error_message=payload.error_message,
                        attempt=payload.attempt,
                    )
                )
        elif isinstance(payload, AbortPayload):
            self.errors.append(
                ErrorRow(
                    file_index=self._file_no(),
                    kind="abort",
                    timestamp=record.timestamp,
                    reason=payload.reason,
                )
            )

    def _on_request_end(self, timestamp: str, payload: RequestEndPayload) -> None:
        if self._open is not None:
            index = self._open
            self.rows[index] = replace(
                self.rows[index],
                status=payload.status,
                attempt=payload.attempt,
                error_message=payload.error_message,
                retry_in_ms=payload.retry_in_ms,
                end=timestamp,
            )
        else:
            # Its request_begin was lost (a malformed line): still a request span.
            self.rows.append(
                UsageRow(
                    file_index=self._file_no(),
                    kind="compaction" if self._in_compaction else "turn",
                    status=payload.status,
                    attempt=payload.attempt,
                    error_message=payload.error_message,
                    retry_in_ms=payload.retry_in_ms,
                    end=timestamp,
                )
            )
            index = len(self.rows) - 1
        self._open = None
        self._just_ended = index
        if payload.retry_in_ms is not None:
            self.retries += 1
        if payload.status != "completed":
            self.errors.append(
                ErrorRow(
                    file_index=self.rows[index].file_index,
                    kind=self.rows[index].kind,
                    timestamp=timestamp,
                    status=payload.status,
                    error_message=payload.error_message,
                    attempt=payload.attempt,
                    retry_in_ms=payload.retry_in_ms,
                )
            )

    def _file_no(self) -> int:
        # Records before any session_meta (a fragment) belong to the first file.
        return max(self._file_index, 1)

    # ------------------------------------------------------------------------- derived views

    def requests_by(self) -> dict[tuple[RowKind, StopReason | None], int]:
        """Number of request spans per ``(kind, status)``; ``status`` ``None`` = never ended."""
        counts: dict[tuple[RowKind, StopReason | None], int] = {}
        for row in self.rows:
            key = (row.kind, row.status)
            counts[key] = counts.get(key, 0) + 1
        return counts

    def tokens_by_kind(self) -> dict[RowKind, TokenCounts]:
        """Sum of the rows' request counts per kind (R-USAGE-2's per-kind sums)."""
        sums: dict[RowKind, TokenCounts] = {"turn": TokenCounts(), "compaction": TokenCounts()}
        for row in self.rows:
            if row.request is not None:
                sums[row.kind] = sums[row.kind] + row.request
        return sums
