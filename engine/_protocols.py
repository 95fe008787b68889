"""The two seams of the engine: the LLM and the Environment (API.md).

Owns: the protocols, the request/outcome records that cross them, and the approval types.  Does
not: implement any of them (adapters live beside: ``engine.llm``, ``engine._local``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, TypeAlias, runtime_checkable

from eventstore import OmniMessage, StopReason
from eventstore import ToolDefinition as ToolDefinition  # re-exported by ``engine``

from ._signal import AbortSignal

if TYPE_CHECKING:
    from ._sandbox import SandboxPolicy

__all__ = [
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
]

Approval: TypeAlias = Literal["allow", "deny", "forbidden"]
ApproveFn: TypeAlias = Callable[[OmniMessage], "Approval | Awaitable[Approval]"]


def allow_all(call: OmniMessage) -> Approval:
    """An approve callback that allows every call."""
    return "allow"


def deny_all(call: OmniMessage) -> Approval:
    """An approve callback that denies every call (the default when none is given)."""
    return "deny"


@dataclass
class LLMRequest:
    """One stateless LLM call: the engine passes the whole context every time."""

    system_prompt: str
    tools: list[ToolDefinition]
    messages: list[OmniMessage]
    new_messages: int
    thinking_level: str | None
    signal: AbortSignal


@dataclass
class LLMOutcome:
    """The last item of every LLM stream."""

    status: StopReason
    message: str | None = None
    permanent: bool = False
    # Seconds the provider asked us to wait (Retry-After); the ladder may honour it.
    retry_after_s: float | None = None


@runtime_checkable
class LLM(Protocol):
    """Streams partials, complete messages and ``token_usage``, then exactly one ``LLMOutcome``.

    Never raises into the engine (R-MSG-24); an implementation that raises anyway is treated as
    ``failed`` with the exception text (R-RUN-3).  Optional capabilities, each its own protocol
    the engine checks with ``isinstance``: ``NamesProvider``, ``NamesModel``,
    ``DeclaresContextWindow`` (SPEC §2.2), ``SeedsToolCallIds`` (R-RUN-20).
    """

    vision: bool

    def stream(self, request: LLMRequest) -> AsyncIterator[OmniMessage | LLMOutcome]: ...


@runtime_checkable
class Environment(Protocol):
    """Runs tool calls.  ``execute`` yields ``partial_tool_call_output`` fragments and then
    exactly one complete ``tool_call_output`` for the call (R-TOOL-1); origin-tagged messages of
    nested sessions may be interleaved."""

    async def list_tools(self) -> list[ToolDefinition]: ...

    def execute(
        self, call: OmniMessage, *, signal: AbortSignal, approve: ApproveFn | None
    ) -> AsyncIterator[OmniMessage]: ...

    def tool_permission(self, name: str) -> Literal["r", "rw"] | None: ...

    async def aclose(self) -> None: ...


# --------------------------------------------------------------------------- optional capabilities


@runtime_checkable
class NamesProvider(Protocol):
    """An LLM that says which provider it talks to (``session_meta.provider``)."""

    provider: str


@runtime_checkable
class NamesModel(Protocol):
    """An LLM that says which model it runs (``session_meta.model_id``)."""

    model_id: str


@runtime_checkable
class DeclaresContextWindow(Protocol):
    """An LLM that declares its context window (``session_meta``, compaction threshold)."""

    context_window: int | None


@runtime_checkable
class SeedsToolCallIds(Protocol):
    """An LLM that allocates ``tool_call_id``s (R-RUN-20) and takes every id the session's
    trace already records, not only those of the history it is sent: a call approved in an
    attempt that a crash left open is closed ``aborted`` on resume and is in no later request.
    ``replay.resume_session`` passes them once, before the session's first request."""

    def seed_tool_call_ids(self, ids: Set[str]) -> None: ...


@runtime_checkable
class BindsScratchpad(Protocol):
    """An Environment that wants the session's scratchpad (archives, images, goal files)."""

    def bind_scratchpad(self, path: Path) -> None: ...


@runtime_checkable
class Sandboxed(Protocol):
    """An Environment that runs its tools under a sandbox (SPEC §25): ``sandbox`` is the policy
    in force, ``set_sandbox`` changes it (raising ``SandboxUnavailable`` where the kernel cannot
    enforce it), ``bind_session`` tells it the data root to hide and the session's own trace
    files (a function: the files rotate)."""

    @property
    def sandbox(self) -> SandboxPolicy: ...

    def set_sandbox(self, policy: SandboxPolicy) -> None: ...

    def bind_session(self, *, data_root: Path, own_files: Callable[[], Sequence[Path]]) -> None: ...


def llm_identity(llm: object) -> tuple[str, str, int | None]:
    """``(provider, model_id, context_window)`` of ``llm``: what it declares, else ``custom``,
    its class name and ``None`` (SPEC §2.2)."""
    provider = llm.provider if isinstance(llm, NamesProvider) else None
    model_id = llm.model_id if isinstance(llm, NamesModel) else None
    window = llm.context_window if isinstance(llm, DeclaresContextWindow) else None
    return (
        str(provider or "custom"),
        str(model_id or type(llm).__name__),
        window if isinstance(window, int) and not isinstance(window, bool) else None,
    )
