"""Owns: ``FileChecker``, one file's pass composed of the check groups: it keeps the file's facts
(``FileFacts``), hands each record to every group in a fixed order, tells them when a run starts,
and moves the span positions once they all have seen the record.  Does not: read lines (the
validator numbers raw lines and decodes them) or compare files.

The order of ``GROUPS`` is the order findings on one line are reported in, kept from the single
pass this replaced: times, compaction, shape, spans, retries, pairing, texts, head.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from types import MethodType
from typing import Any, Final

from eventstore import (
    HOST_EVENT_TYPES,
    CompactionBeginPayload,
    CompactionEndPayload,
    ImageUrlPayload,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    SessionMetaPayload,
    TextPayload,
    ToolListReadyPayload,
    UnknownPayload,
    record_kind,
)

from ._compaction import CompactionChecks
from ._core import CheckGroup, FileFacts, Finding
from ._head import HeadChecks
from ._pairing import PairingChecks
from ._retries import RetryChecks
from ._shape import ShapeChecks
from ._spans import SpanChecks
from ._texts import TextChecks
from ._time import TimeChecks

GROUPS: Final[tuple[type[CheckGroup], ...]] = (
    TimeChecks,
    CompactionChecks,
    ShapeChecks,
    SpanChecks,
    RetryChecks,
    PairingChecks,
    TextChecks,
    HeadChecks,
)
GROUP_NAMES: Final = tuple(group.name for group in GROUPS)


@dataclass(slots=True)
class FileSummary:
    """What the session checks need to know about one file."""

    path: Path
    name_id: str | None
    index: int | None
    meta_line: int = 0
    meta: SessionMetaPayload | None = None
    has_tool_list: bool = False
    second_kind: str | None = None
    second_line: int = 0
    residue: bool = False
    # The line of each tool_call id's first call (R-RUN-20 across files).
    call_lines: dict[str, int] = field(default_factory=dict)


_HOST_KINDS: frozenset[type[Any]] = frozenset(HOST_EVENT_TYPES)


def _starts_run(payload: Any) -> bool:
    """A record that starts a new run (R-RESUME-7b, R-RESUME-10)."""
    if isinstance(payload, TextPayload):
        return payload.role != "assistant"
    return isinstance(
        payload,
        ImageUrlPayload | ToolListReadyPayload | RequestBeginPayload | CompactionBeginPayload,
    )


class FileChecker:
    """One file's checks: ``feed`` each record in order, then ``finish``.  ``groups`` runs only
    the named check groups (``GROUP_NAMES``); an unknown name is a ``ValueError``."""

    def __init__(
        self,
        path: Path,
        *,
        index: int | None,
        name_id: str | None,
        is_highest: bool,
        strict: bool,
        groups: Collection[str] | None = None,
    ) -> None:
        if groups is not None:
            unknown = sorted(set(groups) - set(GROUP_NAMES))
            if unknown:
                raise ValueError(
                    f"unknown check group(s) {', '.join(unknown)}; "
                    f"the groups are {', '.join(GROUP_NAMES)}"
                )
        self.facts = FileFacts(path, index, name_id, is_highest, strict)
        self.groups = [cls(self.facts) for cls in GROUPS if groups is None or cls.name in groups]
        self._handlers: dict[type[Any], list[Callable[[int, Any], None]]] = {}
        for group in self.groups:
            for payload_type, handler in type(group).handlers.items():
                bound = MethodType(handler, group)
                self._handlers.setdefault(payload_type, []).append(bound)

    @property
    def findings(self) -> list[Finding]:
        return self.facts.findings

    def feed(self, line: int, msg: OmniMessage) -> None:
        facts, payload = self.facts, msg.payload
        if type(payload) in _HOST_KINDS and facts.n_records:
            # A host's mark (``session_archived``) is written between runs, after whatever
            # the file holds (a closure, an abort, a crash's open span): no rule of runs,
            # spans or a file's shape applies to it.  Its fields were checked when it decoded.
            return
        kind = record_kind(msg)
        self._note_head(line, kind)
        for group in self.groups:
            if not group.before(line, msg, kind):
                return
        if isinstance(payload, UnknownPayload):
            for group in self.groups:
                group.on_unknown(line, msg, payload)
        else:
            for handler in self._handlers.get(type(payload), ()):
                handler(line, payload)
            if _starts_run(payload):
                for group in self.groups:
                    group.run_starts()
            if msg.type == "model_msg":
                facts.first_model_seen = True
            self._move_spans(line, payload)
        facts.prev_kind, facts.prev_line = kind, line

    def _note_head(self, line: int, kind: str) -> None:
        facts = self.facts
        facts.n_records += 1
        n = facts.n_records
        if n <= 2:
            if n == 1:
                facts.first_kind, facts.first_line = kind, line
                facts.only_head = kind == "session_meta"
            else:
                facts.second_kind, facts.second_line = kind, line
                facts.only_head = facts.only_head and kind in ("tool_list_ready", "settings")
        elif n == 3:
            # R-SET-2c: a rotated head is session_meta, tool_list_ready, settings.
            facts.only_head = (
                facts.only_head and kind == "settings" and facts.second_kind == "tool_list_ready"
            )
        else:
            facts.only_head = False

    def _move_spans(self, line: int, payload: Any) -> None:
        facts = self.facts
        if isinstance(payload, RequestBeginPayload):
            facts.req_line = line
        elif isinstance(payload, RequestEndPayload):
            facts.req_line = None
        elif isinstance(payload, CompactionBeginPayload):
            facts.comp_line = line
        elif isinstance(payload, CompactionEndPayload):
            facts.comp_line = None

    def finish(self) -> None:
        for group in self.groups:
            group.finish()

    def summary(self) -> FileSummary:
        facts = self.facts
        summary = FileSummary(
            path=facts.path,
            name_id=facts.name_id,
            index=facts.index,
            second_kind=facts.second_kind,
            second_line=facts.second_line,
        )
        for group in self.groups:
            if isinstance(group, HeadChecks):
                summary.meta, summary.meta_line = group.meta, group.meta_line
                summary.has_tool_list, summary.residue = group.has_tool_list, group.residue
            elif isinstance(group, PairingChecks):
                summary.call_lines = group.call_lines
        return summary
