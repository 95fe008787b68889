"""Resume, replay, golden files, validation and trace tools: the library under ``penguin``.

Names load on first use (PEP 562): ``from replay import validate_file`` imports
``replay._validate`` alone, not the golden-file tooling (syrupy) or the trace tools, so a CLI
command pays only for what it calls (issue 18).  The ``TYPE_CHECKING`` block below is the same
surface for mypy and IDEs.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import golden
    from ._diff import Difference, TraceDiff, diff_traces
    from ._export import export_trace, redact_record
    from ._fork import fork_session
    from ._import import ImportRefused, ImportResult, import_trace
    from ._labels import request_label
    from ._repair import RepairChange, RepairResult, repair_trace
    from ._replay_llm import ReplayEnvironment, ReplayLLM, recorded_approve
    from ._resume import load_session, resume_session
    from ._rewind import (
        RewindPlan,
        RewindRefused,
        RewindResult,
        TaskChanges,
        collect_snapshots,
        plan_rewind,
        restore_workspace,
        rewind_session,
        session_timeline,
        task_changes,
    )
    from ._timetravel import (
        Position,
        TracePoint,
        context_at,
        parse_position,
        request_at,
        trace_point,
    )
    from ._validate import Finding, validate_file, validate_paths, validate_session

# Public name -> the module that defines it ("" for a submodule exported under its own name).
_LAZY: dict[str, str] = {
    "golden": "",
    **dict.fromkeys(("Difference", "TraceDiff", "diff_traces"), "._diff"),
    **dict.fromkeys(("export_trace", "redact_record"), "._export"),
    "fork_session": "._fork",
    **dict.fromkeys(
        (
            "RewindPlan",
            "RewindRefused",
            "RewindResult",
            "collect_snapshots",
            "plan_rewind",
            "restore_workspace",
            "restore_workspace",
            "rewind_session",
            "TaskChanges",
            "session_timeline",
            "task_changes",
            "task_changes",
        ),
        "._rewind",
    ),
    **dict.fromkeys(("ImportRefused", "ImportResult", "import_trace"), "._import"),
    "request_label": "._labels",
    **dict.fromkeys(("RepairChange", "RepairResult", "repair_trace"), "._repair"),
    **dict.fromkeys(("ReplayEnvironment", "ReplayLLM", "recorded_approve"), "._replay_llm"),
    **dict.fromkeys(("load_session", "resume_session"), "._resume"),
    **dict.fromkeys(
        ("Position", "TracePoint", "context_at", "parse_position", "request_at", "trace_point"),
        "._timetravel",
    ),
    **dict.fromkeys(
        ("Finding", "validate_file", "validate_paths", "validate_session"), "._validate"
    ),
}

__all__ = [
    "Difference",
    "Finding",
    "ImportRefused",
    "ImportResult",
    "Position",
    "ReplayEnvironment",
    "RepairChange",
    "RepairResult",
    "ReplayLLM",
    "TraceDiff",
    "TracePoint",
    "context_at",
    "diff_traces",
    "export_trace",
    "fork_session",
    "RewindPlan",
    "RewindRefused",
    "RewindResult",
    "collect_snapshots",
    "plan_rewind",
    "restore_workspace",
    "rewind_session",
    "TaskChanges",
    "session_timeline",
    "task_changes",
    "golden",
    "import_trace",
    "load_session",
    "parse_position",
    "recorded_approve",
    "redact_record",
    "repair_trace",
    "request_at",
    "request_label",
    "resume_session",
    "trace_point",
    "validate_file",
    "validate_paths",
    "validate_session",
]


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
