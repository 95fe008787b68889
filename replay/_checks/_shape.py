"""Owns: each record's own shape — never a partial or an origin-tagged record (V-3); a payload of
a known type that does not fit its schema, a payload in the wrong envelope, a role outside its
type's range, an ``mcp_connect_end`` result (V-19).  Does not: look at other records.

Unknown payload and envelope types are accepted (R-MSG-7, R-READ-4).
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from eventstore import (
    PARTIAL_PAYLOAD_TYPES,
    ImageUrlPayload,
    InlineThinkingPayload,
    McpConnectEndPayload,
    OmniMessage,
    ThinkingPayload,
    ToolCallOutputPayload,
    ToolCallPayload,
    UnknownPayload,
    unrecognised,
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
        # V-19: damage, as every reader tells it (``eventstore.unrecognised``); a newer writer's
        # payload or envelope type is accepted (R-MSG-7, R-READ-4).
        found = unrecognised(msg)
        if found is not None and found.damaged:
            self.facts.error(line, "V-19", f"{found.kind}: {found.detail}")

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
