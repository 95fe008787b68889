"""Replaying a session that used subagents (SPEC §11 R-SUB-3, R-CLI-6).

Owns: choosing the parent session among the sessions of a directory, linking each recorded
``run_subagent`` call to the child session its ``subagent`` pointer names, finding each child's
trace beside the parent's, the environment that re-runs a child as its own session (through
``SessionSubagentRunner``, so the parent writes its pointer exactly as live) before answering the
call with its recorded output, the live tools of a parent and its children (R-GOLD-7: the
children's calls run for real in the same workspace), and the placeholders that hide child ids
in pointers.  Does not:
infer a child's settings or compare traces (``golden`` does both, for parent and child alike).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

from engine import (
    RUN_SUBAGENT,
    AbortSignal,
    ApproveFn,
    LocalEnvironment,
    SessionSubagentRunner,
    SubagentOutcome,
    ToolDefinition,
    ToolError,
    builtin_tools,
)
from eventstore import (
    OmniMessage,
    SessionMetaPayload,
    SubagentPayload,
    ToolCallOutputPayload,
    ToolCallPayload,
)
from eventstore.builders import stop_reason_of

from ._replay_llm import Located, ReplayEnvironment, TraceSource, _session_of, load_located

__all__ = [
    "ChildLink",
    "LiveChildren",
    "SubagentReplayEnvironment",
    "child_links",
    "child_placeholders",
    "find_child_trace",
    "live_environment",
    "parent_files",
]


@dataclass(frozen=True, slots=True)
class ChildLink:
    """A recorded ``run_subagent`` call and the child session its pointer names."""

    call_id: str
    prompt: str
    session_id: str


def parent_files(trace: TraceSource) -> tuple[TraceSource, Path | None]:
    """``trace`` narrowed to the parent session when it is a directory holding a parent and its
    children, and the directory to look for child traces in (``None`` for records in memory)."""
    if not isinstance(trace, str | os.PathLike):
        paths = [Path(p) for p in trace if isinstance(p, str | os.PathLike)]
        return trace, (paths[0].parent.parent if paths else None)
    path = Path(trace)
    if not path.is_dir():
        return trace, path.parent.parent
    by_session: dict[str, list[Path]] = {}
    for file in sorted(path.rglob("*.jsonl")):
        by_session.setdefault(_session_of(file), []).append(file)
    if len(by_session) <= 1:
        return trace, path
    parents = [s for s, files in by_session.items() if _source(files[0]) != "subagent"]
    if len(parents) != 1:
        names = ", ".join(sorted(parents or by_session))
        raise ValueError(f"{path} holds more than one top-level session: {names}")
    return by_session[parents[0]], path


def _source(first_file: Path) -> str | None:
    for loc in load_located([first_file]):
        if isinstance(loc.record.payload, SessionMetaPayload):
            return loc.record.payload.source
    return None


def child_links(located: Sequence[Located]) -> list[ChildLink]:
    """The children in the order of their pointers.  A pointer belongs to the earliest
    ``run_subagent`` call still waiting for its output and for a child (R-SUB-3: the pointer
    is written while the call runs)."""
    waiting: dict[str, str] = {}  # call id -> prompt, in call order
    links: list[ChildLink] = []
    for loc in located:
        record, p = loc.record, loc.record.payload
        if record.origin is not None:
            continue
        if isinstance(p, ToolCallPayload) and p.name == RUN_SUBAGENT:
            if stop_reason_of(record) == "completed":
                waiting.setdefault(p.tool_call_id, _prompt(p.arguments))
        elif isinstance(p, ToolCallOutputPayload):
            waiting.pop(p.tool_call_id, None)
        elif isinstance(p, SubagentPayload) and waiting:
            call_id = next(iter(waiting))
            links.append(ChildLink(call_id, waiting.pop(call_id), p.session_id))
    return links


def _prompt(arguments: str) -> str:
    try:
        args = json.loads(arguments)
    except ValueError:
        return arguments
    prompt = args.get("prompt") if isinstance(args, dict) else None
    return prompt if isinstance(prompt, str) else arguments


def find_child_trace(session_id: str, near: Path | None) -> list[Path]:
    """The trace files of child ``session_id`` under ``near`` (the directory of the parent's
    dated folders, as in a data root or the golden corpus)."""
    found = sorted(near.rglob(f"{session_id}_*.jsonl")) if near is not None else []
    if not found:
        where = f"under {near}" if near is not None else "(the trace was given as records)"
        raise FileNotFoundError(
            f"the trace of subagent {session_id} (named by the parent's subagent pointer) "
            f"was not found {where}"
        )
    return found


def child_placeholders(ids: Sequence[str]) -> list[tuple[str, str]]:
    """Child ids in pointer order as ``<subagent:N>``, so recorded and replayed ids compare."""
    return [(sid, f"<subagent:{n}>") for n, sid in enumerate(ids, 1)]


def pointer_ids(records: Sequence[OmniMessage]) -> list[str]:
    return [
        r.payload.session_id
        for r in records
        if r.origin is None and isinstance(r.payload, SubagentPayload)
    ]


class SubagentReplayEnvironment:
    """The parent's ``ReplayEnvironment`` with its ``run_subagent`` calls re-running their
    recorded child: the child's messages are forwarded tagged with ``origin`` (so the parent
    writes its pointer, R-SUB-3), then the call gets its recorded output."""

    def __init__(
        self,
        inner: ReplayEnvironment,
        children: dict[str, tuple[ChildLink, SessionSubagentRunner, ApproveFn]],
        *,
        gate: Callable[[str, Literal["start", "output"]], Awaitable[None]] | None = None,
    ) -> None:
        self._inner = inner
        self._children = children
        # Awaited with the call id before its child starts and before its output is given.
        self._gate = gate
        self.approve: ApproveFn = inner.approve

    async def list_tools(self) -> list[ToolDefinition]:
        return await self._inner.list_tools()

    def tool_permission(self, name: str) -> Literal["r", "rw"] | None:
        return self._inner.tool_permission(name)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def execute(
        self, call: OmniMessage, *, signal: AbortSignal, approve: ApproveFn | None
    ) -> AsyncIterator[OmniMessage]:
        p = call.payload
        child = self._children.get(p.tool_call_id) if isinstance(p, ToolCallPayload) else None
        if child is not None:
            link, runner, child_approve = child
            if self._gate is not None:
                await self._gate(link.call_id, "start")
            # The child answers its calls with its own recorded approvals, not the parent's.
            stream = runner.run(link.prompt, signal=signal, approve=child_approve)
            async with aclosing(stream) as items:
                async for item in items:
                    if isinstance(item, OmniMessage) and item.origin:
                        yield item
            if self._gate is not None:
                await self._gate(link.call_id, "output")
        # ReplayEnvironment.execute is an async generator: closed here, not by the collector.
        recorded = cast(
            AsyncGenerator[OmniMessage, None],
            self._inner.execute(call, signal=signal, approve=approve),
        )
        async with aclosing(recorded) as out:
            async for msg in out:
                yield msg


class LiveChildren:
    """The ``SubagentRunner`` of a live-tools replay (R-GOLD-7): each ``run_subagent`` call is
    served by the recorded child that received its prompt (the first one still waiting, as
    children are paired with calls), re-run with its own recorded answers and approvals; its
    tools run for real, in the same workspace as the parent's."""

    def __init__(self, children: Sequence[tuple[str, SessionSubagentRunner, ApproveFn]]) -> None:
        self._waiting = list(children)

    def run(
        self, prompt: str, *, signal: AbortSignal, approve: ApproveFn | None
    ) -> AsyncIterator[OmniMessage | SubagentOutcome]:
        # ``approve`` is the parent's: the child's calls get the child's recorded decisions.
        for n, (recorded, runner, child_approve) in enumerate(self._waiting):
            if recorded == prompt:
                del self._waiting[n]
                return runner.run(prompt, signal=signal, approve=child_approve)
        raise ToolError(f"the recording holds no subagent that received this prompt: {prompt!r}")


def live_environment(
    workspace: Path, listed: Sequence[ToolDefinition] | None, children: LiveChildren
) -> LocalEnvironment:
    """The built-in tools a recorded session listed (all of them when it listed none), over
    ``workspace``, with ``run_subagent`` served by ``children`` when it was listed."""
    names = None if listed is None else {t.name for t in listed}
    tools = [t for t in builtin_tools() if names is None or t.name in names]
    subagents = children if names is None or RUN_SUBAGENT in names else None
    return LocalEnvironment(workspace, tools=tools, subagents=subagents)
