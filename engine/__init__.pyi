"""The public names of ``engine``, listed once.

Type checkers read this stub; at run time ``engine/__init__.py`` derives ``__all__`` and the
lazy ``__getattr__`` (PEP 562) from the same lines (``lazy_loader.attach_stub``), so a name
is exported by adding its import here and nowhere else.
"""

from ._approval import (
    ApprovalRule as ApprovalRule,
    ApprovalRules as ApprovalRules,
)
from ._config import (
    DEFAULT_MAX_TURNS as DEFAULT_MAX_TURNS,
    CompactionSettings as CompactionSettings,
    RetryPolicy as RetryPolicy,
    check_workspace as check_workspace,
)
from ._exceptions import (
    EngineError as EngineError,
    SandboxUnavailable as SandboxUnavailable,
    SessionBroken as SessionBroken,
    SessionBusy as SessionBusy,
)
from ._goal import (
    GoalOptions as GoalOptions,
)
from ._local import (
    LocalEnvironment as LocalEnvironment,
    ToolContext as ToolContext,
)
from ._mcp import (
    McpEnvironment as McpEnvironment,
    McpServer as McpServer,
)
from ._protocols import (
    LLM as LLM,
    Approval as Approval,
    ApproveFn as ApproveFn,
    BindsScratchpad as BindsScratchpad,
    DeclaresContextWindow as DeclaresContextWindow,
    Environment as Environment,
    LLMOutcome as LLMOutcome,
    LLMRequest as LLMRequest,
    NamesModel as NamesModel,
    NamesProvider as NamesProvider,
    Sandboxed as Sandboxed,
    SeedsToolCallIds as SeedsToolCallIds,
    ToolDefinition as ToolDefinition,
    allow_all as allow_all,
    deny_all as deny_all,
    llm_identity as llm_identity,
)
from ._retryable import (
    RETRYABLE_STATUSES as RETRYABLE_STATUSES,
)
from ._sandbox import (
    SANDBOX_MODES as SANDBOX_MODES,
    SandboxMode as SandboxMode,
    SandboxPolicy as SandboxPolicy,
    landlock_abi as landlock_abi,
)
from ._session import (
    Compactability as Compactability,
    RecordListener as RecordListener,
    Session as Session,
)
from ._settings import (
    APPROVAL_MODES as APPROVAL_MODES,
    SessionOptions as SessionOptions,
    approval_mode_of as approval_mode_of,
    approve_for as approve_for,
    public_url as public_url,
    recorded_model as recorded_model,
    recorded_options as recorded_options,
    settings_payload as settings_payload,
    with_approval_mode as with_approval_mode,
)
from ._signal import (
    AbortSignal as AbortSignal,
)
from ._snapshots import (
    ScanCache as ScanCache,
    SnapshotSettings as SnapshotSettings,
    scan_workspace as scan_workspace,
)
from ._subagent import (
    RUN_SUBAGENT as RUN_SUBAGENT,
    SessionSubagentRunner as SessionSubagentRunner,
    SubagentOutcome as SubagentOutcome,
    SubagentRunner as SubagentRunner,
    subagent_tool as subagent_tool,
)
from ._tools import (
    Tool as Tool,
    ToolError as ToolError,
    ToolResult as ToolResult,
    builtin_tools as builtin_tools,
)
