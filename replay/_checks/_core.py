"""Owns: what every check group shares — ``Finding``, the file's facts (``FileFacts``: its name,
where the open request and compaction spans began, the first records, the findings so far) and
the ``CheckGroup`` base a group derives from.  Does not: check anything itself.

The facts are the checker's: a group reads them as they were *before* the record it is handed
(the checker moves the span positions after every group has seen the record), so groups never
depend on each other's order for what they read, only for the order of what they report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final, Literal, TypeAlias

from eventstore import PAYLOAD_TAG_OF, OmniMessage, SessionMetaPayload, UnknownPayload

Severity: TypeAlias = Literal["error", "warning"]

# The kind a finding names for a payload class (its wire tag; ``session_meta`` for the head).
KIND: Final[dict[type[Any], str]] = {**PAYLOAD_TAG_OF, SessionMetaPayload: "session_meta"}


@dataclass(frozen=True, slots=True)
class Finding:
    """One validator finding; ``line`` is 1-based, 0 for a file-level finding."""

    path: Path
    line: int
    rule: str
    severity: Severity
    message: str

    def __str__(self) -> str:
        # R-CLI-5
        return f"{self.path}:{self.line}: {self.rule} {self.severity}: {self.message}"


@dataclass(slots=True)
class FileFacts:
    """One file as the checker has read it so far, and the findings reported on it."""

    path: Path
    index: int | None
    name_id: str | None
    is_highest: bool
    strict: bool
    findings: list[Finding] = field(default_factory=list)

    n_records: int = 0
    first_kind: str | None = None
    first_line: int = 0
    second_kind: str | None = None
    second_line: int = 0
    # Only the head so far: session_meta, then tool_list_ready / settings (R-TRACE-9, R-SET-2c).
    only_head: bool = True
    first_model_seen: bool = False
    prev_kind: str | None = None
    prev_line: int = 0
    # Where the open request (V-4) and compaction (V-5) spans began; ``None`` when none is open.
    req_line: int | None = None
    comp_line: int | None = None

    def error(self, line: int, rule: str, message: str) -> None:
        self.findings.append(Finding(self.path, line, rule, "error", message))

    def warn(self, line: int, rule: str, message: str) -> None:
        self.findings.append(Finding(self.path, line, rule, "warning", message))


Handler: TypeAlias = Callable[[Any, int, Any], None]


class CheckGroup:
    """One concept's checks.  ``handlers`` maps a payload class to the method that checks it;
    ``before`` sees every record first (return ``False`` to check it no further);
    ``on_unknown`` sees a payload the codec kept as ``UnknownPayload``, with its envelope;
    ``run_starts`` is told when a record starts a new run (R-RESUME-7b, R-RESUME-10);
    ``finish`` reports what only the end of the file tells."""

    name: ClassVar[str]
    handlers: ClassVar[Mapping[type[Any], Handler]] = {}

    def __init__(self, facts: FileFacts) -> None:
        self.facts = facts

    def before(self, line: int, msg: OmniMessage, kind: str) -> bool:
        return True

    def on_unknown(self, line: int, msg: OmniMessage, payload: UnknownPayload) -> None:
        return None

    def run_starts(self) -> None:
        return None

    def finish(self) -> None:
        return None
