"""The two seams of the engine: the LLM and the Environment (API.md).

Owns: the protocols, the request/outcome records that cross them, and the approval types.  Does
not: implement any of them (adapters live beside: ``engine.llm``, ``engine._local``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias, runtime_checkable

from eventstore import OmniMessage, StopReason, ToolDefinition

from ._signal import AbortSignal

__all__ = [
    "LLM",
    "Approval",
    "ApproveFn",
    "Environment",
    "LLMOutcome",
    "LLMRequest",
    "allow_all",
    "deny_all",
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
    ``failed`` with the exception text (R-RUN-3).  Optional attributes read by the engine:
    ``provider``, ``model_id``, ``context_window`` (SPEC §2.2).
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
