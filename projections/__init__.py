"""Projections: session state as pure folds over trace records (no I/O).

``ModelContext`` (what the model sees next), ``CarryOver`` (its carry-over part), ``SessionState``
(counters and open spans, with ``GoalState``, the latest goal run) and ``Usage`` (per-request
rows).  Each has ``apply(record)`` and
``from_records(records)``; ``project(records)`` folds all three in one pass (R-PROJ-1a).  The
engine keeps its live state only through these, so live state and rebuilt state are one path.
``FileSummary`` is the fold of one closed file that resume merges instead of re-reading it
(R-TRACE-19).
"""

from __future__ import annotations

from collections.abc import Iterable

from eventstore import OmniMessage

from ._context import CarryOver, ModelContext
from ._goal import GoalOutcome, GoalState
from ._state import SessionState, StateSummary
from ._summary import (
    FileFold,
    FileSummary,
    GoalEffect,
    GoalSummary,
    UsageSummary,
    summarize_file,
    usage_summary,
)
from ._usage import ErrorRow, Usage, UsageRow
from .markers import DEFAULT_COMPACTION_PROMPT

__all__ = [
    "DEFAULT_COMPACTION_PROMPT",
    "CarryOver",
    "ErrorRow",
    "GoalOutcome",
    "GoalState",
    "GoalSummary",
    "FileFold",
    "FileSummary",
    "GoalEffect",
    "ModelContext",
    "SessionState",
    "StateSummary",
    "Usage",
    "UsageRow",
    "UsageSummary",
    "project",
    "summarize_file",
    "usage_summary",
]


def project(records: Iterable[OmniMessage]) -> tuple[ModelContext, SessionState, Usage]:
    """Fold ``ModelContext``, ``SessionState`` and ``Usage`` over ``records`` in one pass."""
    ctx, state, usage = ModelContext(), SessionState(), Usage()
    for record in records:
        ctx.apply(record)
        state.apply(record)
        usage.apply(record)
    return ctx, state, usage
