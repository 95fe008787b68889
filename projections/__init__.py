"""Projections: session state as pure folds over trace records (no I/O).

``ModelContext`` (what the model sees next), ``CarryOver`` (its carry-over part), ``SessionState``
(counters and open spans, with ``GoalState``, the latest goal run) and ``Usage`` (per-request
rows).  Each has ``apply(record)`` and
``from_records(records)``; ``project(records)`` folds all three in one pass (R-PROJ-1a).  The
engine keeps its live state only through these, so live state and rebuilt state are one path.
``FileSummary`` is the fold of one closed file that resume merges instead of re-reading it
(R-TRACE-19).

Names load on first use (PEP 562): ``from projections import markers`` does not load the folds
(issue 18); the ``TYPE_CHECKING`` block is the same surface for mypy and IDEs.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eventstore import OmniMessage

    from ._context import CarryOver, ModelContext
    from ._goal import GoalOutcome, GoalState
    from ._state import SessionSettings, SessionState, StateSummary
    from ._status import RunEnd, SessionStatus, TaskActivity, session_status
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

# Public name -> the module that defines it.
_LAZY: dict[str, str] = {
    **dict.fromkeys(("CarryOver", "ModelContext"), "._context"),
    **dict.fromkeys(("GoalOutcome", "GoalState"), "._goal"),
    **dict.fromkeys(("SessionSettings", "SessionState", "StateSummary"), "._state"),
    **dict.fromkeys(("RunEnd", "SessionStatus", "TaskActivity", "session_status"), "._status"),
    **dict.fromkeys(
        (
            "FileFold",
            "FileSummary",
            "GoalEffect",
            "GoalSummary",
            "UsageSummary",
            "summarize_file",
            "usage_summary",
        ),
        "._summary",
    ),
    **dict.fromkeys(("ErrorRow", "Usage", "UsageRow"), "._usage"),
    "DEFAULT_COMPACTION_PROMPT": ".markers",
    "markers": "",  # a submodule, as ``projections.markers``
}

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
    "RunEnd",
    "SessionSettings",
    "SessionState",
    "SessionStatus",
    "StateSummary",
    "TaskActivity",
    "Usage",
    "UsageRow",
    "UsageSummary",
    "project",
    "session_status",
    "summarize_file",
    "usage_summary",
]


def project(records: Iterable[OmniMessage]) -> tuple[ModelContext, SessionState, Usage]:
    """Fold ``ModelContext``, ``SessionState`` and ``Usage`` over ``records`` in one pass."""
    from ._context import ModelContext
    from ._state import SessionState
    from ._usage import Usage

    ctx, state, usage = ModelContext(), SessionState(), Usage()
    for record in records:
        ctx.apply(record)
        state.apply(record)
        usage.apply(record)
    return ctx, state, usage


def __getattr__(name: str) -> Any:
    source = _LAZY.get(name)
    if source is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = import_module(source or f".{name}", __name__)
    value = module if not source else getattr(module, name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
