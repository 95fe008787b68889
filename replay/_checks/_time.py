"""Owns: record times — every ``timestamp`` is an ISO 8601 time (V-19, R-MSG-2) and, with
``strict``, never earlier than the record before it (V-20).  Does not: compare files."""

from __future__ import annotations

from datetime import UTC, datetime

from eventstore import OmniMessage, TextPayload
from projections import markers as mk

from ._core import CheckGroup, FileFacts


def ts_key(ts: str) -> datetime | None:
    """The time ``ts`` names (UTC when it names no zone), ``None`` when it is not ISO 8601."""
    try:
        value = datetime.fromisoformat(ts)
    except ValueError:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class TimeChecks(CheckGroup):
    name = "time"

    def __init__(self, facts: FileFacts) -> None:
        super().__init__(facts)
        self.prev_ts: datetime | None = None
        self.prev_ts_text = ""
        self.prev_ts_line = 0

    def before(self, line: int, msg: OmniMessage, kind: str) -> bool:
        if ts_key(msg.timestamp) is None:
            # R-MSG-2: every reader (resume's times, analytics) needs the time; a garbled one
            # would otherwise surface as a missing time far from here.
            shown = msg.timestamp if len(msg.timestamp) <= 40 else msg.timestamp[:40] + "…"
            self.facts.error(line, "V-19", f"timestamp {shown!r} is not an ISO 8601 time")
        elif self.facts.strict:
            self._check_order(line, msg, kind)
        return True

    def _check_order(self, line: int, msg: OmniMessage, kind: str) -> None:
        facts = self.facts
        if kind == "session_meta" or (kind == "tool_list_ready" and facts.n_records == 2):
            return  # rotated heads re-write old timestamps (R-TRACE-9)
        if kind == "settings" and facts.only_head:
            return  # a rotated head's settings record, stamped as its head (R-SET-2c)
        payload = msg.payload
        if (
            isinstance(payload, TextPayload)
            and payload.role == "user"
            and mk.is_context_summary(payload.text)
        ):
            return  # stamped with its compaction_end's time (R-PROJ-3a)
        key = ts_key(msg.timestamp)
        if key is None:
            return
        if self.prev_ts is not None and key < self.prev_ts:
            facts.warn(
                line,
                "V-20",
                f"timestamp {msg.timestamp} is earlier than {self.prev_ts_text} "
                f"(line {self.prev_ts_line})",
            )
        self.prev_ts, self.prev_ts_text, self.prev_ts_line = key, msg.timestamp, line
