"""The OmniMessage schema (SPEC §2).

Owns: the envelope and every payload as ``msgspec.Struct``s, with wire field names and key order
exactly as SPEC §2 fixes them.  Does not: decode or encode lines (``_codec``), build messages
(``builders``) or know anything of the engine.

Key order on the wire is the field order below: msgspec writes a tagged struct's ``type`` first and
then its fields in definition order, skipping fields that still hold their default
(``omit_defaults``).  Every payload may carry ``extra``: keys this version does not know, kept so
that a trace written by a newer writer round-trips (R-MSG-7).  It is never set by builders.
"""

from __future__ import annotations

from typing import Any, Final, Literal, TypeAlias

import msgspec

__all__ = [
    "EVENT_PAYLOAD_TYPES",
    "MODEL_PAYLOAD_TYPES",
    "PARTIAL_PAYLOAD_TYPES",
    "MODEL_PAYLOAD_TAGS",
    "EVENT_PAYLOAD_TAGS",
    "PAYLOAD_TAG_OF",
    "AbortPayload",
    "ApprovalDecisionPayload",
    "Approval",
    "CompactionBeginPayload",
    "CompactionEndPayload",
    "CompactionMode",
    "CompactionReason",
    "EventPayload",
    "EventType",
    "HEAD_EVENT_TYPES",
    "HOST_EVENT_TYPES",
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
    "Role",
    "Sender",
    "SessionArchivedPayload",
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
]

StopReason: TypeAlias = Literal["completed", "failed", "aborted", "timeout", "malformed", "auth"]
Role: TypeAlias = Literal["user", "assistant"]
Sender: TypeAlias = Literal["user", "parent_agent", "harness", "server"]
EventType: TypeAlias = Literal["start", "delta", "stop"]
Approval: TypeAlias = Literal["allow", "deny", "forbidden"]
CompactionReason: TypeAlias = Literal["context", "turns", "manual"]
CompactionMode: TypeAlias = Literal["summarize", "discard"]

# The wire name of the side field that holds unknown keys.  No writer produces a key by that
# name; a payload that has one anyway takes the slow path in the codec and keeps it as an extra.
EXTRA_WIRE_NAME: Final = "$extra"


def _empty_to_none(obj: Any, name: str) -> None:
    value = getattr(obj, name)
    if value is not None and not value:
        msgspec.structs.force_setattr(obj, name, None)


class _Payload(
    msgspec.Struct,
    frozen=True,
    omit_defaults=True,
    forbid_unknown_fields=True,
    kw_only=True,
    tag_field="type",
):
    extra: dict[str, Any] | None = msgspec.field(default=None, name=EXTRA_WIRE_NAME)


# --------------------------------------------------------------------------- complete model_msg


class TextPayload(_Payload, tag="text", kw_only=True, frozen=True):
    role: Role
    text: str
    stop_reason: StopReason | None = None
    fidelity: dict[str, Any] | None = None
    sender: Sender | None = None

    def __post_init__(self) -> None:
        _empty_to_none(self, "fidelity")


class ImageUrlPayload(_Payload, tag="image_url", kw_only=True, frozen=True):
    role: Role
    image_url: str
    stop_reason: StopReason | None = None


class InlineDataPayload(_Payload, tag="inline_data", kw_only=True, frozen=True):
    role: Role
    data: str
    mime_type: str
    stop_reason: StopReason | None = None
    fidelity: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        _empty_to_none(self, "fidelity")


class ThinkingPayload(_Payload, tag="thinking", kw_only=True, frozen=True):
    role: Role
    thinking: str
    stop_reason: StopReason | None = None
    fidelity: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        _empty_to_none(self, "fidelity")


class InlineThinkingPayload(_Payload, tag="inline_thinking", kw_only=True, frozen=True):
    role: Role
    data: str
    mime_type: str
    stop_reason: StopReason | None = None
    fidelity: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        _empty_to_none(self, "fidelity")


class ToolCallPayload(_Payload, tag="tool_call", kw_only=True, frozen=True):
    role: Role
    name: str
    arguments: str
    tool_call_id: str
    stop_reason: StopReason | None = None
    fidelity: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        _empty_to_none(self, "fidelity")


class ToolCallOutputPayload(_Payload, tag="tool_call_output", kw_only=True, frozen=True):
    role: Role
    output: str
    images: list[str] | None = None
    tool_call_id: str
    stop_reason: StopReason | None = None


# --------------------------------------------------------------------------- partial model_msg


class PartialTextPayload(_Payload, tag="partial_text", kw_only=True, frozen=True):
    role: Role
    event_type: EventType
    text: str
    stop_reason: StopReason | None = None


class PartialThinkingPayload(_Payload, tag="partial_thinking", kw_only=True, frozen=True):
    role: Role
    event_type: EventType
    thinking: str
    stop_reason: StopReason | None = None


class PartialToolCallPayload(_Payload, tag="partial_tool_call", kw_only=True, frozen=True):
    role: Role
    event_type: EventType
    name: str
    arguments: str
    tool_call_id: str
    stop_reason: StopReason | None = None


class PartialToolCallOutputPayload(
    _Payload, tag="partial_tool_call_output", kw_only=True, frozen=True
):
    role: Role
    event_type: EventType
    output: str
    images: list[str] | None = None
    tool_call_id: str
    stop_reason: StopReason | None = None


# --------------------------------------------------------------------------- event_msg


class TokenCounts(msgspec.Struct, frozen=True):
    """R-MSG-17: cached input, uncached input, output, and their sum."""

    cache_read: int = 0
    cache_write: int = 0
    output: int = 0
    total: int = 0

    def __add__(self, other: TokenCounts) -> TokenCounts:
        return TokenCounts(
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
            self.output + other.output,
            self.total + other.total,
        )


class ToolDefinition(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """R-MSG-21: what the model is told about one tool."""

    name: str
    description: str
    parameters: dict[str, Any] | None = None


class RequestBeginPayload(_Payload, tag="request_begin", kw_only=True, frozen=True):
    pass


class RequestEndPayload(_Payload, tag="request_end", kw_only=True, frozen=True):
    status: StopReason
    error_message: str | None = None
    attempt: int | None = None
    retry_in_ms: int | None = None


class TokenUsagePayload(_Payload, tag="token_usage", kw_only=True, frozen=True):
    session: TokenCounts
    request: TokenCounts


class ApprovalDecisionPayload(_Payload, tag="approval_decision", kw_only=True, frozen=True):
    decision: Approval
    tool_call_id: str


class AbortPayload(_Payload, tag="abort", kw_only=True, frozen=True):
    # No default: R-MSG-5 requires `reason` on the wire even when it is null.
    reason: str | None


class CompactionBeginPayload(_Payload, tag="compaction_begin", kw_only=True, frozen=True):
    reason: CompactionReason
    mode: CompactionMode
    context: int
    turns: int


class CompactionEndPayload(_Payload, tag="compaction_end", kw_only=True, frozen=True):
    reason: CompactionReason
    mode: CompactionMode
    status: StopReason
    attempt: int | None = None
    error_message: str | None = None


class ToolListReadyPayload(_Payload, tag="tool_list_ready", kw_only=True, frozen=True):
    tools: list[ToolDefinition]


class SubagentPayload(_Payload, tag="subagent", kw_only=True, frozen=True):
    session_id: str


class McpConnectBeginPayload(_Payload, tag="mcp_connect_begin", kw_only=True, frozen=True):
    servers: list[str]


class McpConnectEndPayload(_Payload, tag="mcp_connect_end", kw_only=True, frozen=True):
    status: Literal["completed", "failed", "aborted"]
    # Each result is kept as the object it is on the wire (R-MSG-23); the engine never reads them.
    results: list[dict[str, Any]]


class GoalFinishedPayload(_Payload, tag="goal_finished", kw_only=True, frozen=True):
    outcome: Literal["complete", "blocked", "budget_limited", "aborted"]
    rounds: int
    tokens_used: int


class WorkspaceSnapshotPayload(_Payload, tag="workspace_snapshot", kw_only=True, frozen=True):
    """R-SNAP-1: the workspace as it was before a turn's tools ran (or at a run's end):
    ``id`` names the manifest in the agent's snapshot store.  Not model context."""

    id: str
    files: int
    bytes: int
    skipped: int | None = None


class SettingsPayload(_Payload, tag="settings", kw_only=True, frozen=True):
    """SPEC R-SET-1: the complete settings in effect from this record on (not a diff).

    Every key is optional and omitted when it does not apply (a reference trace has no settings
    record at all).  The nested values are plain JSON objects, not structs, so that a key a newer
    writer adds inside one of them (a new compaction option) is still read by this version and
    round-trips unchanged; the engine converts them (``engine.settings_from_record``).

    How a feature adds a key: one optional field here (default ``None``, so it is omitted on the
    wire), filled where the engine states its settings (``engine._settings``) and read back
    where a resumed session takes them (the same module).  Never a secret (R-SET-4).
    """

    # "ask" | "allow-all" | "deny-all" | "callback" (a library host's own approve function).
    approval: str | None = None
    # Per tool (or MCP server) name: "allow" | "deny" | "ask", overriding ``approval``.
    approval_rules: dict[str, str] | None = None
    max_turns: int | None = None
    # {mode, max_context_length, max_session_turns, prompt (only when not the default)};
    # ``False``: compaction disabled (SPEC R-COMPACT-1).
    compaction: dict[str, Any] | bool | None = None
    # {max_reconnects, base_ms, cap_ms, request_timeout_ms?, compaction_max_reconnects?}
    retry: dict[str, Any] | None = None
    # The default thinking level of runs that do not pass one.
    thinking_level: str | None = None
    # {provider, model_id, base_url?}: the endpoint without userinfo (R-SET-4).
    model: dict[str, Any] | None = None
    # The enabled tool names, when the host restricts them.
    tools: list[str] | None = None
    # The tools' sandbox (SPEC §25): "workspace-write" | "read-only" | "off", and TCP access.
    sandbox: str | None = None
    network: bool | None = None
    # Workspace snapshots (SPEC §27): {max_file_bytes, max_snapshot_bytes}; ``False``: off.
    snapshots: dict[str, Any] | bool | None = None
    # MCP servers (SPEC §26) by name: {transport, command | url, timeout_ms?, connect_timeout_ms?}
    # — the command or the URL without userinfo and query, never env or header values.
    mcp: dict[str, Any] | None = None


class SessionArchivedPayload(_Payload, tag="session_archived", kw_only=True, frozen=True):
    """A host's mark on the session, written outside its runs (Web App "Archive", ``penguin
    sessions --archive``): ``archived`` is true to hide the session from the default listing,
    false to show it again; the last one wins.  Not model context, not part of any run: every
    projection of the conversation skips it (``HOST_EVENT_TYPES``).  Not ``penguin archive``,
    which moves closed trace files to object storage."""

    archived: bool


# --------------------------------------------------------------------------- session_meta, unknown


class SessionMetaPayload(
    msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True, kw_only=True
):
    """SPEC §2.2.  Has no ``type`` key on the wire."""

    session_id: str
    provider: str
    model_id: str
    model_context_window: int | str
    system_prompt: str
    agent_state: str
    workspace: str
    source: Literal["subagent", "schedule"] | None = None
    extra: dict[str, Any] | None = msgspec.field(default=None, name=EXTRA_WIRE_NAME)


class UnknownPayload(msgspec.Struct, frozen=True):
    """A payload this version cannot type: an unknown ``type``, or a known one whose fields do
    not fit the schema.  ``raw`` is the JSON object as read and is written back unchanged."""

    raw: dict[str, Any]

    @property
    def type(self) -> str | None:
        t = self.raw.get("type")
        return t if isinstance(t, str) else None

    @property
    def extra(self) -> None:
        return None


ModelPayload: TypeAlias = (
    TextPayload
    | ImageUrlPayload
    | InlineDataPayload
    | ThinkingPayload
    | InlineThinkingPayload
    | ToolCallPayload
    | ToolCallOutputPayload
    | PartialTextPayload
    | PartialThinkingPayload
    | PartialToolCallPayload
    | PartialToolCallOutputPayload
)
EventPayload: TypeAlias = (
    RequestBeginPayload
    | RequestEndPayload
    | TokenUsagePayload
    | ApprovalDecisionPayload
    | AbortPayload
    | CompactionBeginPayload
    | CompactionEndPayload
    | ToolListReadyPayload
    | SubagentPayload
    | McpConnectBeginPayload
    | McpConnectEndPayload
    | GoalFinishedPayload
    | WorkspaceSnapshotPayload
    | SettingsPayload
    | SessionArchivedPayload
)
Payload: TypeAlias = ModelPayload | EventPayload | SessionMetaPayload | UnknownPayload

MODEL_PAYLOAD_TYPES: Final[tuple[type[_Payload], ...]] = (
    TextPayload,
    ImageUrlPayload,
    InlineDataPayload,
    ThinkingPayload,
    InlineThinkingPayload,
    ToolCallPayload,
    ToolCallOutputPayload,
    PartialTextPayload,
    PartialThinkingPayload,
    PartialToolCallPayload,
    PartialToolCallOutputPayload,
)
PARTIAL_PAYLOAD_TYPES: Final[tuple[type[_Payload], ...]] = (
    PartialTextPayload,
    PartialThinkingPayload,
    PartialToolCallPayload,
    PartialToolCallOutputPayload,
)
EVENT_PAYLOAD_TYPES: Final[tuple[type[_Payload], ...]] = (
    RequestBeginPayload,
    RequestEndPayload,
    TokenUsagePayload,
    ApprovalDecisionPayload,
    AbortPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    ToolListReadyPayload,
    SubagentPayload,
    McpConnectBeginPayload,
    McpConnectEndPayload,
    GoalFinishedPayload,
    WorkspaceSnapshotPayload,
    SettingsPayload,
    SessionArchivedPayload,
)


HEAD_EVENT_TYPES: Final[tuple[type[_Payload], ...]] = (ToolListReadyPayload, SettingsPayload)
"""The events a rotation writes after ``session_meta`` at a new file's head (R-TRACE-8,
R-SET-2c): a file that holds nothing else is crash residue (R-ROOT-10), and they do not start
a new context (R-PROJ-1)."""

HOST_EVENT_TYPES: Final[tuple[type[_Payload], ...]] = (SessionArchivedPayload,)
"""Marks a host writes on a session between its runs (``session_archived``): no part of the
conversation, of a run or of a file's shape.  The projections of the session (state, status,
context, file summaries) skip them as they skip partials, so a trace folds to the same state
with or without them; only the projection that reads the mark looks at them."""


def _tag(cls: type[_Payload]) -> str:
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str)
    return tag


# The payload tag <-> class map, one copy for the codec, the validator and the tools.
MODEL_PAYLOAD_TAGS: Final[dict[str, type[_Payload]]] = {_tag(c): c for c in MODEL_PAYLOAD_TYPES}
"""``model_msg`` payload ``type`` -> class (partials included)."""
EVENT_PAYLOAD_TAGS: Final[dict[str, type[_Payload]]] = {_tag(c): c for c in EVENT_PAYLOAD_TYPES}
"""``event_msg`` payload ``type`` -> class."""
PAYLOAD_TAG_OF: Final[dict[type[Any], str]] = {
    **{c: t for t, c in MODEL_PAYLOAD_TAGS.items()},
    **{c: t for t, c in EVENT_PAYLOAD_TAGS.items()},
}
"""Payload class -> its ``type`` tag (``SessionMetaPayload`` has none)."""


class OmniMessage(msgspec.Struct, frozen=True, omit_defaults=True):
    """The envelope (R-MSG-1): ``timestamp``, ``type``, ``payload`` and optional ``origin``.

    ``type`` is kept as a string so that a record with an envelope type this version does not
    know survives a round trip (R-READ-4); its payload is then an ``UnknownPayload``.
    """

    timestamp: str
    type: str
    payload: Payload
    origin: list[str] | None = None
    # Envelope keys this version does not know (see the module docstring).
    extra: dict[str, Any] | None = msgspec.field(default=None, name=EXTRA_WIRE_NAME)

    @property
    def is_partial(self) -> bool:
        return isinstance(self.payload, PARTIAL_PAYLOAD_TYPES)

    # Records are immutable: copies share them (projection snapshots copy fold state cheaply).
    def __copy__(self) -> OmniMessage:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> OmniMessage:
        return self
