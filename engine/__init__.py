"""The engine: the agent loop over the trace (SPEC §5–§12).

``Session`` drives Tasks against an ``LLM`` and an ``Environment``; every record goes through
the trace writer and is folded into the projections, which are the session's only state.

Names load on first use (PEP 562), so importing one module (``engine._config``, say) does not
load the session loop, anyio and the tools; the ``TYPE_CHECKING`` block is the same surface for
mypy and IDEs (issue 18).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eventstore import ToolDefinition

    from ._approval import ApprovalRule, ApprovalRules
    from ._config import (
        DEFAULT_MAX_TURNS,
        CompactionSettings,
        RetryPolicy,
        check_workspace,
    )
    from ._exceptions import EngineError, SandboxUnavailable, SessionBroken, SessionBusy
    from ._goal import GoalOptions
    from ._local import LocalEnvironment, ToolContext
    from ._mcp import McpEnvironment, McpServer
    from ._protocols import (
        LLM,
        Approval,
        ApproveFn,
        BindsScratchpad,
        DeclaresContextWindow,
        Environment,
        LLMOutcome,
        LLMRequest,
        NamesModel,
        NamesProvider,
        Sandboxed,
        SeedsToolCallIds,
        allow_all,
        deny_all,
        llm_identity,
    )
    from ._retryable import RETRYABLE_STATUSES
    from ._sandbox import SANDBOX_MODES, SandboxMode, SandboxPolicy, landlock_abi
    from ._session import Compactability, RecordListener, Session
    from ._settings import (
        APPROVAL_MODES,
        SessionOptions,
        approval_mode_of,
        approve_for,
        public_url,
        recorded_model,
        recorded_options,
        settings_payload,
        with_approval_mode,
    )
    from ._signal import AbortSignal
    from ._snapshots import ScanCache, SnapshotSettings, scan_workspace
    from ._subagent import (
        RUN_SUBAGENT,
        SessionSubagentRunner,
        SubagentOutcome,
        SubagentRunner,
        subagent_tool,
    )
    from ._tools import Tool, ToolError, ToolResult, builtin_tools

# Public name -> the module that defines it.
_LAZY: dict[str, str] = {
    "ToolDefinition": "eventstore",
    **dict.fromkeys(
        (
            "DEFAULT_MAX_TURNS",
            "CompactionSettings",
            "RetryPolicy",
            "check_workspace",
        ),
        "._config",
    ),
    **dict.fromkeys(("ApprovalRule", "ApprovalRules"), "._approval"),
    **dict.fromkeys(
        ("EngineError", "SandboxUnavailable", "SessionBroken", "SessionBusy"), "._exceptions"
    ),
    **dict.fromkeys(("SANDBOX_MODES", "SandboxMode", "SandboxPolicy", "landlock_abi"), "._sandbox"),
    "RETRYABLE_STATUSES": "._retryable",  # not ._config: the validator needs no pydantic
    "GoalOptions": "._goal",
    **dict.fromkeys(("ScanCache", "SnapshotSettings", "scan_workspace"), "._snapshots"),
    **dict.fromkeys(("LocalEnvironment", "ToolContext"), "._local"),
    **dict.fromkeys(("McpEnvironment", "McpServer"), "._mcp"),
    **dict.fromkeys(
        (
            "LLM",
            "Approval",
            "ApproveFn",
            "BindsScratchpad",
            "DeclaresContextWindow",
            "Environment",
            "LLMOutcome",
            "LLMRequest",
            "NamesModel",
            "NamesProvider",
            "Sandboxed",
            "SeedsToolCallIds",
            "allow_all",
            "deny_all",
            "llm_identity",
        ),
        "._protocols",
    ),
    **dict.fromkeys(("Compactability", "RecordListener", "Session"), "._session"),
    **dict.fromkeys(
        (
            "APPROVAL_MODES",
            "SessionOptions",
            "approval_mode_of",
            "approve_for",
            "public_url",
            "recorded_model",
            "recorded_options",
            "settings_payload",
            "with_approval_mode",
        ),
        "._settings",
    ),
    "AbortSignal": "._signal",
    **dict.fromkeys(
        (
            "RUN_SUBAGENT",
            "SessionSubagentRunner",
            "SubagentOutcome",
            "SubagentRunner",
            "subagent_tool",
        ),
        "._subagent",
    ),
    **dict.fromkeys(("Tool", "ToolError", "ToolResult", "builtin_tools"), "._tools"),
}

__all__ = [
    "APPROVAL_MODES",
    "DEFAULT_MAX_TURNS",
    "RETRYABLE_STATUSES",
    "LLM",
    "RUN_SUBAGENT",
    "SANDBOX_MODES",
    "AbortSignal",
    "Approval",
    "ApprovalRule",
    "ApprovalRules",
    "ApproveFn",
    "BindsScratchpad",
    "Compactability",
    "CompactionSettings",
    "DeclaresContextWindow",
    "EngineError",
    "Environment",
    "GoalOptions",
    "LLMOutcome",
    "LLMRequest",
    "LocalEnvironment",
    "McpEnvironment",
    "McpServer",
    "NamesModel",
    "NamesProvider",
    "RecordListener",
    "RetryPolicy",
    "SandboxMode",
    "SandboxPolicy",
    "SandboxUnavailable",
    "Sandboxed",
    "ScanCache",
    "SnapshotSettings",
    "SeedsToolCallIds",
    "Session",
    "SessionBroken",
    "SessionBusy",
    "SessionOptions",
    "SessionSubagentRunner",
    "SubagentOutcome",
    "SubagentRunner",
    "Tool",
    "ToolContext",
    "ToolDefinition",
    "ToolError",
    "ToolResult",
    "allow_all",
    "approval_mode_of",
    "approve_for",
    "builtin_tools",
    "check_workspace",
    "deny_all",
    "landlock_abi",
    "llm_identity",
    "scan_workspace",
    "public_url",
    "recorded_model",
    "recorded_options",
    "settings_payload",
    "subagent_tool",
    "with_approval_mode",
]


def __getattr__(name: str) -> Any:
    source = _LAZY.get(name)
    if source is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(source, __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
