"""Resume, replay, golden files, validation and trace tools: the library under ``penguin``."""

from __future__ import annotations

from . import golden
from ._diff import Difference, TraceDiff, diff_traces
from ._export import export_trace, redact_record
from ._fork import fork_session
from ._import import ImportRefused, ImportResult, import_trace
from ._repair import RepairChange, RepairResult, repair_trace
from ._replay_llm import ReplayEnvironment, ReplayLLM, recorded_approve
from ._resume import load_session, resume_session
from ._timetravel import Position, TracePoint, context_at, parse_position, request_at, trace_point
from ._validate import Finding, validate_file, validate_paths, validate_session

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
    "golden",
    "import_trace",
    "load_session",
    "parse_position",
    "recorded_approve",
    "redact_record",
    "repair_trace",
    "request_at",
    "resume_session",
    "trace_point",
    "validate_file",
    "validate_paths",
    "validate_session",
]
