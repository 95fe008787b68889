"""The engine: the agent loop over the trace (SPEC §5–§12).

``Session`` drives Tasks against an ``LLM`` and an ``Environment``; every record goes through
the trace writer and is folded into the projections, which are the session's only state.
"""

from __future__ import annotations

from eventstore import ToolDefinition

from ._config import (
    DEFAULT_MAX_TURNS,
    RETRYABLE_STATUSES,
    CompactionSettings,
    RetryPolicy,
    check_workspace,
)
from ._exceptions import EngineError, SessionBroken, SessionBusy
from ._goal import GoalOptions
from ._local import LocalEnvironment, ToolContext
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
    allow_all,
    deny_all,
    llm_identity,
)
from ._session import Compactability, RecordListener, Session
from ._signal import AbortSignal
from ._subagent import (
    RUN_SUBAGENT,
    SessionSubagentRunner,
    SubagentOutcome,
    SubagentRunner,
    subagent_tool,
)
from ._tools import Tool, ToolError, ToolResult, builtin_tools

__all__ = [
    "DEFAULT_MAX_TURNS",
    "RETRYABLE_STATUSES",
    "LLM",
    "RUN_SUBAGENT",
    "AbortSignal",
    "Approval",
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
    "NamesModel",
    "NamesProvider",
    "RecordListener",
    "RetryPolicy",
    "Session",
    "SessionBroken",
    "SessionBusy",
    "SessionSubagentRunner",
    "SubagentOutcome",
    "SubagentRunner",
    "Tool",
    "ToolContext",
    "ToolDefinition",
    "ToolError",
    "ToolResult",
    "allow_all",
    "builtin_tools",
    "check_workspace",
    "deny_all",
    "llm_identity",
    "subagent_tool",
]
