"""The public names of ``eventstore``, listed once.

Type checkers read this stub; at run time ``eventstore/__init__.py`` derives ``__all__`` and the
lazy ``__getattr__`` (PEP 562) from the same lines (``lazy_loader.attach_stub``), so a name
is exported by adding its import here and nowhere else.
"""

from . import (
    builders as builders,
    partials as partials,
)
from ._codec import (
    decode as decode,
    encode as encode,
    encode_line as encode_line,
)
from ._diagnostics import (
    Diagnostic as Diagnostic,
    DiagnosticKind as DiagnosticKind,
)
from ._dirs import (
    make_private_dirs as make_private_dirs,
    sync_dir as sync_dir,
)
from ._discovery import (
    OutsideCheck as OutsideCheck,
    OutsideRootWarning as OutsideRootWarning,
    find_trace_files as find_trace_files,
)
from ._exceptions import (
    RecordTooLarge as RecordTooLarge,
    SessionLocked as SessionLocked,
    TraceDecodeError as TraceDecodeError,
    TraceError as TraceError,
    TraceWriteError as TraceWriteError,
)
from ._kinds import (
    Unrecognised as Unrecognised,
    record_kind as record_kind,
    unrecognised as unrecognised,
)
from ._layout import (
    DEFAULT_AGENT as DEFAULT_AGENT,
    DEFAULT_PROJECT as DEFAULT_PROJECT,
    DataRoot as DataRoot,
    SessionInfo as SessionInfo,
    validate_id as validate_id,
)
from ._listing import (
    FileStat as FileStat,
    SessionFiles as SessionFiles,
    edge_digest as edge_digest,
    file_stat as file_stat,
)
from ._lock import (
    LockProbe as LockProbe,
    lock_path_of as lock_path_of,
    probe_lock as probe_lock,
)
from ._marks import (
    mark_archived as mark_archived,
)
from ._names import (
    parse_trace_name as parse_trace_name,
    trace_file_name as trace_file_name,
)
from ._private import (
    create_private as create_private,
    write_private as write_private,
)
from ._reader import (
    MAX_LINE_BYTES as MAX_LINE_BYTES,
    TraceRead as TraceRead,
    file_index as file_index,
    iter_trace as iter_trace,
    read_trace as read_trace,
    scan_trace as scan_trace,
)
from ._schema import (
    EVENT_PAYLOAD_TAGS as EVENT_PAYLOAD_TAGS,
    EVENT_PAYLOAD_TYPES as EVENT_PAYLOAD_TYPES,
    EXTRA_WIRE_NAME as EXTRA_WIRE_NAME,
    HEAD_EVENT_TYPES as HEAD_EVENT_TYPES,
    HOST_EVENT_TYPES as HOST_EVENT_TYPES,
    MODEL_PAYLOAD_TAGS as MODEL_PAYLOAD_TAGS,
    MODEL_PAYLOAD_TYPES as MODEL_PAYLOAD_TYPES,
    PARTIAL_PAYLOAD_TYPES as PARTIAL_PAYLOAD_TYPES,
    PAYLOAD_TAG_OF as PAYLOAD_TAG_OF,
    AbortPayload as AbortPayload,
    Approval as Approval,
    ApprovalDecisionPayload as ApprovalDecisionPayload,
    CompactionBeginPayload as CompactionBeginPayload,
    CompactionEndPayload as CompactionEndPayload,
    CompactionMode as CompactionMode,
    CompactionReason as CompactionReason,
    EventPayload as EventPayload,
    GoalFinishedPayload as GoalFinishedPayload,
    ImageUrlPayload as ImageUrlPayload,
    InlineDataPayload as InlineDataPayload,
    InlineThinkingPayload as InlineThinkingPayload,
    McpConnectBeginPayload as McpConnectBeginPayload,
    McpConnectEndPayload as McpConnectEndPayload,
    ModelPayload as ModelPayload,
    OmniMessage as OmniMessage,
    PartialTextPayload as PartialTextPayload,
    PartialThinkingPayload as PartialThinkingPayload,
    PartialToolCallOutputPayload as PartialToolCallOutputPayload,
    PartialToolCallPayload as PartialToolCallPayload,
    Payload as Payload,
    RequestBeginPayload as RequestBeginPayload,
    RequestEndPayload as RequestEndPayload,
    SessionArchivedPayload as SessionArchivedPayload,
    SessionMetaPayload as SessionMetaPayload,
    SettingsPayload as SettingsPayload,
    StopReason as StopReason,
    SubagentPayload as SubagentPayload,
    TextPayload as TextPayload,
    ThinkingPayload as ThinkingPayload,
    TokenCounts as TokenCounts,
    TokenUsagePayload as TokenUsagePayload,
    ToolCallOutputPayload as ToolCallOutputPayload,
    ToolCallPayload as ToolCallPayload,
    ToolDefinition as ToolDefinition,
    ToolListReadyPayload as ToolListReadyPayload,
    UnknownPayload as UnknownPayload,
    WorkspaceSnapshotPayload as WorkspaceSnapshotPayload,
)
from ._sniff import (
    not_a_trace as not_a_trace,
)
from ._summaries import (
    SummaryCache as SummaryCache,
    sidecar_path as sidecar_path,
)
from ._tail import (
    TailRead as TailRead,
    TailRecord as TailRecord,
    complete_lines as complete_lines,
    tail as tail,
)
from ._writer import (
    FsyncPolicy as FsyncPolicy,
    TraceWriter as TraceWriter,
)
