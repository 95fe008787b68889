"""Builders and guards for OmniMessages.

Owns: constructing well-formed records (timestamp stamped at construction, ``stop_reason``
stamped on every model message, R-MSG-14) and the small predicates everyone needs.  Does not:
encode, write or interpret records.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import msgspec

from ._schema import (
    PARTIAL_PAYLOAD_TYPES,
    PAYLOAD_TAG_OF,
    AbortPayload,
    Approval,
    ApprovalDecisionPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    CompactionMode,
    CompactionReason,
    EventType,
    GoalFinishedPayload,
    ImageUrlPayload,
    InlineDataPayload,
    OmniMessage,
    PartialTextPayload,
    PartialThinkingPayload,
    PartialToolCallOutputPayload,
    PartialToolCallPayload,
    RequestBeginPayload,
    RequestEndPayload,
    Sender,
    SessionArchivedPayload,
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

__all__ = [
    "abort",
    "goal_finished",
    "workspace_snapshot",
    "session_archived",
    "approval_decision",
    "assistant_text",
    "compaction_begin",
    "compaction_end",
    "image_url",
    "inline_data",
    "is_event",
    "is_model_msg",
    "is_partial",
    "is_recordable",
    "now_iso",
    "partial_text",
    "partial_thinking",
    "partial_tool_call",
    "partial_tool_call_output",
    "payload_type",
    "request_begin",
    "request_end",
    "restamped",
    "session_meta",
    "settings",
    "stop_reason_of",
    "subagent",
    "text",
    "thinking",
    "token_usage",
    "tool_call",
    "tool_call_output",
    "tool_list_ready",
    "user_text",
]


# The last string ``now_iso`` made and its millisecond: a burst of records (streamed deltas)
# shares one, and formatting it was a tenth of a streamed delta's cost.  One tuple, replaced
# whole, so a thread that reads it sees a matching pair.
_now_cache: tuple[int, str] = (-1, "")


def now_iso() -> str:
    """The current UTC time as ``2026-07-18T03:10:22.531Z`` (R-MSG-2)."""
    global _now_cache
    millis = time.time_ns() // 1_000_000
    cached_ms, text = _now_cache
    if millis == cached_ms:
        return text
    secs, ms = divmod(millis, 1000)
    tm = time.gmtime(secs)
    text = (
        f"{tm.tm_year:04d}-{tm.tm_mon:02d}-{tm.tm_mday:02d}T"
        f"{tm.tm_hour:02d}:{tm.tm_min:02d}:{tm.tm_sec:02d}.{ms:03d}Z"
    )
    _now_cache = (millis, text)
    return text


def _model(payload: Any, timestamp: str | None, origin: list[str] | None = None) -> OmniMessage:
    return OmniMessage(timestamp or now_iso(), "model_msg", payload, origin or None)


def _event(payload: Any, timestamp: str | None) -> OmniMessage:
    return OmniMessage(timestamp or now_iso(), "event_msg", payload)


def _fidelity(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    # R-MSG-13: an empty object is treated as absent.
    return dict(value) if value else None


# --------------------------------------------------------------------------- model messages


def text(
    role: Literal["user", "assistant"],
    body: str,
    *,
    stop_reason: StopReason = "completed",
    fidelity: Mapping[str, Any] | None = None,
    sender: Sender | None = None,
    timestamp: str | None = None,
) -> OmniMessage:
    # R-MSG-12: "user" is the default sender and is never written explicitly.
    if sender == "user":
        sender = None
    return _model(
        TextPayload(
            role=role,
            text=body,
            stop_reason=stop_reason,
            fidelity=_fidelity(fidelity),
            sender=sender,
        ),
        timestamp,
    )


def user_text(
    body: str, *, sender: Sender | None = None, timestamp: str | None = None
) -> OmniMessage:
    return text("user", body, sender=sender, timestamp=timestamp)


def assistant_text(
    body: str,
    *,
    stop_reason: StopReason = "completed",
    fidelity: Mapping[str, Any] | None = None,
    timestamp: str | None = None,
) -> OmniMessage:
    return text("assistant", body, stop_reason=stop_reason, fidelity=fidelity, timestamp=timestamp)


def thinking(
    body: str,
    *,
    stop_reason: StopReason = "completed",
    fidelity: Mapping[str, Any] | None = None,
    timestamp: str | None = None,
) -> OmniMessage:
    return _model(
        ThinkingPayload(
            role="assistant", thinking=body, stop_reason=stop_reason, fidelity=_fidelity(fidelity)
        ),
        timestamp,
    )


def image_url(url: str, *, timestamp: str | None = None) -> OmniMessage:
    return _model(ImageUrlPayload(role="user", image_url=url, stop_reason="completed"), timestamp)


def inline_data(
    data: str,
    mime_type: str,
    *,
    role: Literal["user", "assistant"] = "user",
    timestamp: str | None = None,
) -> OmniMessage:
    return _model(
        InlineDataPayload(role=role, data=data, mime_type=mime_type, stop_reason="completed"),
        timestamp,
    )


def _arguments(arguments: str | Mapping[str, Any]) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(dict(arguments), separators=(",", ":"), ensure_ascii=False)


def tool_call(
    name: str,
    arguments: str | Mapping[str, Any],
    tool_call_id: str,
    *,
    stop_reason: StopReason = "completed",
    fidelity: Mapping[str, Any] | None = None,
    timestamp: str | None = None,
) -> OmniMessage:
    """R-MSG-9: ``arguments`` is stored as a JSON string; a mapping is serialized compactly."""
    return _model(
        ToolCallPayload(
            role="assistant",
            name=name,
            arguments=_arguments(arguments),
            tool_call_id=tool_call_id,
            stop_reason=stop_reason,
            fidelity=_fidelity(fidelity),
        ),
        timestamp,
    )


def tool_call_output(
    tool_call_id: str,
    output: str,
    *,
    stop_reason: StopReason = "completed",
    images: Iterable[str] | None = None,
    timestamp: str | None = None,
    origin: list[str] | None = None,
) -> OmniMessage:
    imgs = list(images) if images else None
    return _model(
        ToolCallOutputPayload(
            role="user",
            output=output,
            images=imgs,
            tool_call_id=tool_call_id,
            stop_reason=stop_reason,
        ),
        timestamp,
        origin,
    )


# --------------------------------------------------------------------------- partials


def partial_text(
    event_type: EventType,
    body: str = "",
    *,
    stop_reason: StopReason = "completed",
    timestamp: str | None = None,
) -> OmniMessage:
    return _model(
        PartialTextPayload(
            role="assistant", event_type=event_type, text=body, stop_reason=stop_reason
        ),
        timestamp,
    )


def partial_thinking(
    event_type: EventType,
    body: str = "",
    *,
    stop_reason: StopReason = "completed",
    timestamp: str | None = None,
) -> OmniMessage:
    return _model(
        PartialThinkingPayload(
            role="assistant", event_type=event_type, thinking=body, stop_reason=stop_reason
        ),
        timestamp,
    )


def partial_tool_call(
    event_type: EventType,
    tool_call_id: str,
    *,
    name: str = "",
    arguments: str = "",
    stop_reason: StopReason = "completed",
    timestamp: str | None = None,
) -> OmniMessage:
    return _model(
        PartialToolCallPayload(
            role="assistant",
            event_type=event_type,
            name=name,
            arguments=arguments,
            tool_call_id=tool_call_id,
            stop_reason=stop_reason,
        ),
        timestamp,
    )


def partial_tool_call_output(
    event_type: EventType,
    tool_call_id: str,
    output: str = "",
    *,
    images: Iterable[str] | None = None,
    stop_reason: StopReason = "completed",
    timestamp: str | None = None,
) -> OmniMessage:
    imgs = list(images) if images else None
    return _model(
        PartialToolCallOutputPayload(
            role="user",
            event_type=event_type,
            output=output,
            images=imgs,
            tool_call_id=tool_call_id,
            stop_reason=stop_reason,
        ),
        timestamp,
    )


# --------------------------------------------------------------------------- events


def request_begin(*, timestamp: str | None = None) -> OmniMessage:
    return _event(RequestBeginPayload(), timestamp)


def request_end(
    status: StopReason,
    *,
    error_message: str | None = None,
    attempt: int | None = None,
    retry_in_ms: int | None = None,
    timestamp: str | None = None,
) -> OmniMessage:
    return _event(
        RequestEndPayload(
            status=status, error_message=error_message, attempt=attempt, retry_in_ms=retry_in_ms
        ),
        timestamp,
    )


def token_usage(
    request: TokenCounts,
    session: TokenCounts | None = None,
    *,
    timestamp: str | None = None,
) -> OmniMessage:
    """``session`` defaults to ``request``; the engine restamps it (R-RUN-10)."""
    return _event(TokenUsagePayload(session=session or request, request=request), timestamp)


def approval_decision(
    decision: Approval, tool_call_id: str, *, timestamp: str | None = None
) -> OmniMessage:
    return _event(ApprovalDecisionPayload(decision=decision, tool_call_id=tool_call_id), timestamp)


def abort(reason: str | None = None, *, timestamp: str | None = None) -> OmniMessage:
    return _event(AbortPayload(reason=reason), timestamp)


def goal_finished(
    outcome: Literal["complete", "blocked", "budget_limited", "aborted"],
    rounds: int,
    tokens_used: int,
    *,
    timestamp: str | None = None,
) -> OmniMessage:
    """R-MSG-22: the last message of a goal run (SPEC §18)."""
    return _event(
        GoalFinishedPayload(outcome=outcome, rounds=rounds, tokens_used=tokens_used), timestamp
    )


def compaction_begin(
    reason: CompactionReason,
    mode: CompactionMode,
    *,
    context: int,
    turns: int,
    timestamp: str | None = None,
) -> OmniMessage:
    return _event(
        CompactionBeginPayload(reason=reason, mode=mode, context=context, turns=turns), timestamp
    )


def compaction_end(
    reason: CompactionReason,
    mode: CompactionMode,
    status: StopReason,
    *,
    attempt: int | None = None,
    error_message: str | None = None,
    timestamp: str | None = None,
) -> OmniMessage:
    return _event(
        CompactionEndPayload(
            reason=reason, mode=mode, status=status, attempt=attempt, error_message=error_message
        ),
        timestamp,
    )


def tool_list_ready(
    tools: Iterable[ToolDefinition], *, timestamp: str | None = None
) -> OmniMessage:
    return _event(ToolListReadyPayload(tools=list(tools)), timestamp)


def restamped(msg: OmniMessage) -> OmniMessage:
    """``msg`` stamped now (R-SET-6: a record is stamped when it is written)."""
    return msgspec.structs.replace(msg, timestamp=now_iso())


def settings(payload: SettingsPayload, *, timestamp: str | None = None) -> OmniMessage:
    """R-SET-1: the ``settings`` event stating the complete settings in effect."""
    return _event(payload, timestamp)


def subagent(session_id: str, *, timestamp: str | None = None) -> OmniMessage:
    return _event(SubagentPayload(session_id=session_id), timestamp)


def session_meta(
    *,
    session_id: str,
    provider: str,
    model_id: str,
    model_context_window: int | str,
    system_prompt: str,
    agent_state: str,
    workspace: str,
    source: Literal["subagent", "schedule"] | None = None,
    timestamp: str | None = None,
) -> OmniMessage:
    return OmniMessage(
        timestamp or now_iso(),
        "session_meta",
        SessionMetaPayload(
            session_id=session_id,
            provider=provider,
            model_id=model_id,
            model_context_window=model_context_window,
            system_prompt=system_prompt,
            agent_state=agent_state,
            workspace=workspace,
            source=source,
        ),
    )


# --------------------------------------------------------------------------- guards


def is_partial(msg: OmniMessage) -> bool:
    return isinstance(msg.payload, PARTIAL_PAYLOAD_TYPES)


def is_model_msg(msg: OmniMessage) -> bool:
    return msg.type == "model_msg"


def is_event(msg: OmniMessage) -> bool:
    return msg.type == "event_msg"


def is_recordable(msg: OmniMessage) -> bool:
    """R-TRACE-2: partials and origin-tagged messages are never written."""
    return msg.origin is None and not isinstance(msg.payload, PARTIAL_PAYLOAD_TYPES)


def payload_type(msg: OmniMessage) -> str | None:
    """The payload's ``type`` (``None`` for ``session_meta``, which has none)."""
    payload = msg.payload
    if isinstance(payload, UnknownPayload):
        return payload.type
    return PAYLOAD_TAG_OF.get(type(payload))


def stop_reason_of(msg: OmniMessage) -> StopReason:
    """R-MSG-14: an absent ``stop_reason`` reads as ``completed``."""
    value: StopReason | None = getattr(msg.payload, "stop_reason", None)
    return value or "completed"


def workspace_snapshot(
    snapshot_id: str,
    files: int,
    size: int,
    *,
    skipped: int | None = None,
    timestamp: str | None = None,
) -> OmniMessage:
    """R-SNAP-1: a snapshot of the workspace taken into the agent's snapshot store."""
    return _event(
        WorkspaceSnapshotPayload(id=snapshot_id, files=files, bytes=size, skipped=skipped or None),
        timestamp,
    )


def session_archived(archived: bool = True, *, timestamp: str | None = None) -> OmniMessage:
    """A host's archive mark (``False``: unarchived); the last one wins.  Not model context."""
    return _event(SessionArchivedPayload(archived=archived), timestamp)
