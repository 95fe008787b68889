"""Resume, replay, golden files and validation: the library under the ``penguin`` application."""

from __future__ import annotations

from . import golden
from ._diff import Difference, TraceDiff, diff_traces
from ._fork import fork_session
from ._repair import RepairChange, RepairResult, repair_trace
from ._replay_llm import ReplayEnvironment, ReplayLLM, recorded_approve
from ._resume import load_session, resume_session
from ._timetravel import Position, TracePoint, context_at, parse_position, request_at, trace_point
from ._validate import Finding, validate_file, validate_paths, validate_session

__all__ = [
    "Difference",
    "Finding",
    "Position",
    "ReplayEnvironment",
    "RepairChange",
    "RepairResult",
    "ReplayLLM",
    "TraceDiff",
    "TracePoint",
    "context_at",
    "diff_traces",
    "fork_session",
    "golden",
    "load_session",
    "parse_position",
    "recorded_approve",
    "repair_trace",
    "request_at",
    "resume_session",
    "trace_point",
    "validate_file",
    "validate_paths",
    "validate_session",
]
