"""Owns: each record's own shape — never a partial or an origin-tagged record (V-3); a payload of
a known type that does not fit its schema, a payload in the wrong envelope, a role outside its
type's range, an ``mcp_connect_end`` result (V-19).  Does not: look at other records.

Unknown payload and envelope types are accepted (R-MSG-7, R-READ-4).
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

import msgspec

from eventstore import (
    EVENT_PAYLOAD_TAGS,
    EXTRA_WIRE_NAME,
    MODEL_PAYLOAD_TAGS,
    PARTIAL_PAYLOAD_TYPES,
    ImageUrlPayload,
    InlineThinkingPayload,
    McpConnectEndPayload,
    OmniMessage,
    SessionMetaPayload,
    ThinkingPayload,
    ToolCallOutputPayload,
    ToolCallPayload,
    UnknownPayload,
)

from ._core import KIND, CheckGroup, Handler

# §2.3: the roles each complete model payload may carry.
_ROLES: Final[dict[type[Any], frozenset[str]]] = {
    ImageUrlPayload: frozenset({"user"}),
    ThinkingPayload: frozenset({"assistant"}),
    InlineThinkingPayload: frozenset({"assistant"}),
    ToolCallPayload: frozenset({"assistant"}),
    ToolCallOutputPayload: frozenset({"user"}),
}
_MCP_TRANSPORTS: Final = frozenset({"stdio", "http", "sse"})
_MCP_STATUSES: Final = frozenset({"completed", "failed", "aborted"})


class ShapeChecks(CheckGroup):
    name = "shape"

    def before(self, line: int, msg: OmniMessage, kind: str) -> bool:
        # V-3: partials and origin-tagged records are never recorded; nothing else is checked on
        # them (an origin-tagged output does not pair with this session's calls, R-SUB-2).
        if isinstance(msg.payload, PARTIAL_PAYLOAD_TYPES):
            self.facts.error(line, "V-3", f"partial record {kind}")
            return False
        if msg.origin is not None:
            self.facts.error(line, "V-3", f"record with origin {msg.origin}")
            return False
        return True

    def on_unknown(self, line: int, msg: OmniMessage, payload: UnknownPayload) -> None:
        # V-19: a payload of a known type the codec could not convert is kept as UnknownPayload.
        raw = payload.raw
        if msg.type == "session_meta":
            self.facts.error(line, "V-19", f"session_meta: {shape_error(SessionMetaPayload, raw)}")
            return
        if msg.type not in ("model_msg", "event_msg"):
            return  # an envelope type of a newer writer (R-READ-4)
        tag = raw.get("type")
        if not isinstance(tag, str):
            self.facts.error(line, "V-19", f"{msg.type} payload without a string type")
            return
        own, other = (
            (MODEL_PAYLOAD_TAGS, EVENT_PAYLOAD_TAGS)
            if msg.type == "model_msg"
            else (EVENT_PAYLOAD_TAGS, MODEL_PAYLOAD_TAGS)
        )
        cls = own.get(tag)
        if cls is not None:
            self.facts.error(line, "V-19", f"{tag}: {shape_error(cls, raw)}")
        elif tag in other:
            self.facts.error(line, "V-19", f"payload type {tag} in a {msg.type} envelope")

    def _check_role(self, line: int, payload: Any) -> None:
        allowed = _ROLES.get(type(payload))
        if allowed is not None and payload.role not in allowed:
            self.facts.error(line, "V-19", f"{KIND[type(payload)]} with role {payload.role!r}")

    def _check_mcp(self, line: int, payload: McpConnectEndPayload) -> None:
        for i, result in enumerate(payload.results):
            problem = _mcp_result_problem(result)
            if problem:
                self.facts.error(line, "V-19", f"mcp_connect_end result {i}: {problem}")
                return

    handlers: ClassVar[dict[type[Any], Handler]] = {
        **dict.fromkeys(_ROLES, _check_role),
        McpConnectEndPayload: _check_mcp,
    }


def shape_error(cls: type[Any], raw: dict[str, Any]) -> str:
    """Why ``raw`` does not convert to ``cls`` (its extra fields aside)."""
    fields = set(cls.__struct_encode_fields__) - {EXTRA_WIRE_NAME}
    known = {k: v for k, v in raw.items() if k in fields}
    try:
        msgspec.convert(known, cls)
    except msgspec.ValidationError as exc:
        return str(exc)
    except RecursionError:
        return "nesting too deep"
    return "does not fit its schema"  # pragma: no cover - the codec refused it for a reason


def _mcp_result_problem(result: dict[str, Any]) -> str:
    if not isinstance(result.get("server"), str):
        return "server missing or not a string"
    if result.get("transport") not in _MCP_TRANSPORTS:
        return f"transport {result.get('transport')!r} not stdio|http|sse"
    if result.get("status") not in _MCP_STATUSES:
        return f"status {result.get('status')!r} not completed|failed|aborted"
    duration = result.get("duration_ms")
    if not isinstance(duration, int | float) or isinstance(duration, bool):
        return "duration_ms missing or not a number"
    return ""
