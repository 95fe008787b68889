"""The trace store: the OmniMessage schema, its codec, the append-only writer, the tolerant
reader and the on-disk layout.  Knows nothing of the engine.

Names load on first use (PEP 562), so ``from eventstore import TraceError`` does not load
msgspec, the schema or the writer (issue 18: the CLI's start-up); the ``TYPE_CHECKING`` block is
the same surface for mypy and IDEs.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._codec import decode, encode, encode_line
    from ._diagnostics import Diagnostic, DiagnosticKind
    from ._dirs import make_private_dirs, sync_dir
    from ._exceptions import (
        RecordTooLarge,
        SessionLocked,
        TraceDecodeError,
        TraceError,
        TraceWriteError,
    )
    from ._layout import (
        DEFAULT_AGENT,
        DEFAULT_PROJECT,
        DataRoot,
        SessionInfo,
        validate_id,
    )
    from ._lock import LockProbe, lock_path_of, probe_lock
    from ._names import parse_trace_name, trace_file_name
    from ._private import create_private, write_private
    from ._reader import (
        MAX_LINE_BYTES,
        TraceRead,
        file_index,
        iter_trace,
        read_trace,
        scan_trace,
    )
    from ._schema import (
        EVENT_PAYLOAD_TAGS,
        EVENT_PAYLOAD_TYPES,
        EXTRA_WIRE_NAME,
        HEAD_EVENT_TYPES,
        MODEL_PAYLOAD_TAGS,
        MODEL_PAYLOAD_TYPES,
        PARTIAL_PAYLOAD_TYPES,
        PAYLOAD_TAG_OF,
        AbortPayload,
        Approval,
        ApprovalDecisionPayload,
        CompactionBeginPayload,
        CompactionEndPayload,
        CompactionMode,
        CompactionReason,
        EventPayload,
        GoalFinishedPayload,
        ImageUrlPayload,
        InlineDataPayload,
        InlineThinkingPayload,
        McpConnectBeginPayload,
        McpConnectEndPayload,
        ModelPayload,
        OmniMessage,
        PartialTextPayload,
        PartialThinkingPayload,
        PartialToolCallOutputPayload,
        PartialToolCallPayload,
        Payload,
        RequestBeginPayload,
        RequestEndPayload,
        SessionMetaPayload,
        SettingsPayload,
        StopReason,
        SubagentPayload,
        TextPayload,
        ThinkingPayload,
        TokenCounts,
        TokenUsagePayload,
        ToolCallOutputPayload,
        ToolCallPayload,
        ToolDefinition,
        ToolListReadyPayload,
        UnknownPayload,
        WorkspaceSnapshotPayload,
    )
    from ._sniff import not_a_trace
    from ._summaries import SummaryCache, sidecar_path
    from ._tail import TailRead, TailRecord, complete_lines, tail
    from ._writer import FsyncPolicy, TraceWriter

# Public name -> the module that defines it.
_LAZY: dict[str, str] = {
    **dict.fromkeys(
        ("decode", "encode", "encode_line"),
        "._codec",
    ),
    **dict.fromkeys(
        ("Diagnostic", "DiagnosticKind"),
        "._diagnostics",
    ),
    **dict.fromkeys(("make_private_dirs", "sync_dir"), "._dirs"),
    **dict.fromkeys(
        ("RecordTooLarge", "SessionLocked", "TraceDecodeError", "TraceError", "TraceWriteError"),
        "._exceptions",
    ),
    **dict.fromkeys(("LockProbe", "lock_path_of", "probe_lock"), "._lock"),
    **dict.fromkeys(("create_private", "write_private"), "._private"),
    "not_a_trace": "._sniff",
    **dict.fromkeys(("TailRead", "TailRecord", "complete_lines", "tail"), "._tail"),
    **dict.fromkeys(
        ("DEFAULT_AGENT", "DEFAULT_PROJECT", "DataRoot", "SessionInfo", "validate_id"),
        "._layout",
    ),
    **dict.fromkeys(
        ("parse_trace_name", "trace_file_name"),
        "._names",
    ),
    **dict.fromkeys(
        ("MAX_LINE_BYTES", "TraceRead", "file_index", "iter_trace", "read_trace", "scan_trace"),
        "._reader",
    ),
    **dict.fromkeys(
        (
            "EVENT_PAYLOAD_TAGS",
            "EVENT_PAYLOAD_TYPES",
            "EXTRA_WIRE_NAME",
            "HEAD_EVENT_TYPES",
            "MODEL_PAYLOAD_TAGS",
            "MODEL_PAYLOAD_TYPES",
            "PARTIAL_PAYLOAD_TYPES",
            "PAYLOAD_TAG_OF",
            "AbortPayload",
            "Approval",
            "ApprovalDecisionPayload",
            "CompactionBeginPayload",
            "CompactionEndPayload",
            "CompactionMode",
            "CompactionReason",
            "EventPayload",
            "GoalFinishedPayload",
            "ImageUrlPayload",
            "InlineDataPayload",
            "InlineThinkingPayload",
            "McpConnectBeginPayload",
            "McpConnectEndPayload",
            "ModelPayload",
            "OmniMessage",
            "PartialTextPayload",
            "PartialThinkingPayload",
            "PartialToolCallOutputPayload",
            "PartialToolCallPayload",
            "Payload",
            "RequestBeginPayload",
            "RequestEndPayload",
            "SessionMetaPayload",
            "SettingsPayload",
            "StopReason",
            "SubagentPayload",
            "TextPayload",
            "ThinkingPayload",
            "TokenCounts",
            "TokenUsagePayload",
            "ToolCallOutputPayload",
            "ToolCallPayload",
            "ToolDefinition",
            "ToolListReadyPayload",
            "UnknownPayload",
            "WorkspaceSnapshotPayload",
            "WorkspaceSnapshotPayload",
        ),
        "._schema",
    ),
    **dict.fromkeys(
        ("SummaryCache", "sidecar_path"),
        "._summaries",
    ),
    **dict.fromkeys(
        ("FsyncPolicy", "TraceWriter"),
        "._writer",
    ),
    "builders": "",  # submodules, as ``eventstore.builders``
    "partials": "",
}

__all__ = [
    "DEFAULT_AGENT",
    "DEFAULT_PROJECT",
    "EVENT_PAYLOAD_TAGS",
    "EVENT_PAYLOAD_TYPES",
    "EXTRA_WIRE_NAME",
    "HEAD_EVENT_TYPES",
    "MAX_LINE_BYTES",
    "MODEL_PAYLOAD_TAGS",
    "PAYLOAD_TAG_OF",
    "MODEL_PAYLOAD_TYPES",
    "PARTIAL_PAYLOAD_TYPES",
    "AbortPayload",
    "Approval",
    "ApprovalDecisionPayload",
    "CompactionBeginPayload",
    "CompactionEndPayload",
    "CompactionMode",
    "CompactionReason",
    "DataRoot",
    "Diagnostic",
    "DiagnosticKind",
    "EventPayload",
    "FsyncPolicy",
    "GoalFinishedPayload",
    "ImageUrlPayload",
    "InlineDataPayload",
    "InlineThinkingPayload",
    "LockProbe",
    "McpConnectBeginPayload",
    "McpConnectEndPayload",
    "ModelPayload",
    "OmniMessage",
    "PartialTextPayload",
    "PartialThinkingPayload",
    "PartialToolCallOutputPayload",
    "PartialToolCallPayload",
    "Payload",
    "RecordTooLarge",
    "RequestBeginPayload",
    "RequestEndPayload",
    "SessionInfo",
    "SessionLocked",
    "SessionMetaPayload",
    "SettingsPayload",
    "StopReason",
    "SubagentPayload",
    "SummaryCache",
    "TailRead",
    "TailRecord",
    "TextPayload",
    "ThinkingPayload",
    "TokenCounts",
    "TokenUsagePayload",
    "ToolCallOutputPayload",
    "ToolCallPayload",
    "ToolDefinition",
    "ToolListReadyPayload",
    "TraceDecodeError",
    "TraceError",
    "TraceRead",
    "TraceWriteError",
    "TraceWriter",
    "UnknownPayload",
    "WorkspaceSnapshotPayload",
    "complete_lines",
    "create_private",
    "decode",
    "encode",
    "encode_line",
    "file_index",
    "iter_trace",
    "lock_path_of",
    "make_private_dirs",
    "not_a_trace",
    "parse_trace_name",
    "probe_lock",
    "read_trace",
    "scan_trace",
    "trace_file_name",
    "sidecar_path",
    "sync_dir",
    "tail",
    "validate_id",
    "write_private",
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
