"""Subagents: the ``run_subagent`` tool and the runner that hosts child sessions (SPEC §11).

Owns: the ``SubagentRunner`` protocol that ``LocalEnvironment`` depends on (the runner is
injected, so the environment never depends on the layers that run sessions), the
``SubagentOutcome`` a runner ends with, the ``run_subagent`` tool factory, and
``SessionSubagentRunner``, which runs each call as an independent child ``Session`` in the same
data root and workspace: origin forwarding (R-SUB-1), the child's ``session_meta`` first so the
parent writes its ``subagent`` pointer (R-SUB-3/4), the parent's approve callback seeing the
child's calls tagged with ``origin`` (R-SUB-5), the nesting cap, abort propagation, and the
order children announce themselves in (their calls', so the parent's pointers follow it).  Does
not: write anything to the parent trace (the parent ``Session`` writes the pointer and never the
child's messages, R-SUB-2/3), frame the tool output (``LocalEnvironment`` does), or decide what
the child's trace holds (the child ``Session`` does, under its own abort and carry-over rules).

Why the runner is an async context manager: a child session is concurrent work (its driver and
its tool tasks) that must keep running between the ``yield``s of the tool that forwards its
messages, and an async generator may not hold a task group across a ``yield``.  So the children
live in the runner's task group, entered by the host around the parent session, and the tool
only reads a memory stream.
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, Self, TypeAlias, runtime_checkable

import anyio
import anyio.abc
import msgspec
from anyio.streams.memory import MemoryObjectSendStream
from pydantic import BaseModel, ConfigDict, Field

from eventstore import AbortPayload, DataRoot, OmniMessage, TextPayload
from eventstore import builders as b
from eventstore.builders import is_partial, payload_type, stop_reason_of
from projections import markers as mk

from ._agen import as_agen
from ._protocols import LLM, ApproveFn, Environment, Sandboxed
from ._sandbox import SandboxPolicy
from ._signal import AbortSignal
from ._tools import Tool, ToolError, ToolItem, ToolResult

if TYPE_CHECKING:
    from ._local import ToolContext
    from ._session import Session

__all__ = [
    "DEPTH_CAP_MESSAGE",
    "RUN_SUBAGENT",
    "EnvironmentFactory",
    "RunSubagentArgs",
    "SessionSubagentRunner",
    "SubagentOutcome",
    "SubagentRunner",
    "subagent_tool",
    "tag_origin",
]

RUN_SUBAGENT: Final = "run_subagent"
DEPTH_CAP_MESSAGE: Final = (
    "subagents cannot be started here: the subagent nesting depth is capped at {max_depth}"
)
_NOT_OPEN: Final = (
    "subagents are unavailable: the subagent runner is not open (enter it with `async with`)"
)
_NO_OUTCOME: Final = "the subagent ended without an outcome"

# How many subagent sessions enclose the current task.  A child's driver and tool tasks are
# started from its host task, so they inherit the host's value: a tool call inside a child sees
# the child's depth whatever environment the host built for it.
_DEPTH: ContextVar[int] = ContextVar("penguin_subagent_depth", default=0)
# The sandbox of the run_subagent call being served: its child gets the same (SPEC §25).
PARENT_SANDBOX: ContextVar[SandboxPolicy | None] = ContextVar(
    "penguin_parent_sandbox", default=None
)

# Abort reasons that mean "the child was interrupted" rather than "the child failed" (R-CARRY-9).
_INTERRUPTED: Final = frozenset(
    {mk.ABORT_BY_USER, mk.ABORT_DURING_BACKOFF, mk.ABORT_DURING_COMPACTION}
)


# --------------------------------------------------------------------------- the protocol


@dataclass(frozen=True, kw_only=True)
class SubagentOutcome:
    """How a child run ended: the last item a ``SubagentRunner`` yields.

    ``answer`` is the child's final answer (the text of the last assistant ``text`` of its run,
    compaction summaries excluded); ``error`` says why a ``failed`` child failed.
    """

    session_id: str
    status: Literal["completed", "aborted", "failed"]
    answer: str = ""
    error: str | None = None


@runtime_checkable
class SubagentRunner(Protocol):
    """Runs one prompt as a child session on behalf of a tool call.

    ``run`` yields the child's messages, each tagged with ``origin`` (the child's session id
    first, R-SUB-1) and starting with the child's ``session_meta``; then exactly one
    ``SubagentOutcome``.  The child's tool calls reach ``approve`` tagged the same way (R-SUB-5).
    When ``signal`` fires the child is aborted and ``run`` ends promptly with an ``aborted``
    outcome.  A refusal (nesting cap, runner not available) is raised as ``ToolError`` before
    anything is yielded.
    """

    def run(
        self, prompt: str, *, signal: AbortSignal, approve: ApproveFn | None
    ) -> AsyncIterator[OmniMessage | SubagentOutcome]: ...


def tag_origin(msg: OmniMessage, session_id: str) -> OmniMessage:
    """``msg`` as seen one level up: ``session_id`` prepended to its ``origin`` (R-MSG-4)."""
    return msgspec.structs.replace(msg, origin=[session_id, *(msg.origin or ())])


# --------------------------------------------------------------------------- the tool


class RunSubagentArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(
        min_length=1,
        description=(
            "The complete task for the subagent. It sees nothing of this conversation, so "
            "include every fact, path and constraint it needs, and say what its final answer "
            "should contain."
        ),
    )


_DESCRIPTION: Final = (
    "Delegate a self-contained task to a subagent: a fresh agent with its own context window, "
    "working in the same workspace with the same tools (it cannot start subagents itself). It "
    "sees only `prompt`. Its intermediate steps stay out of your context; the output of this "
    "call is its final answer. Use it for work that would otherwise fill your context (e.g. "
    "searching or reading many files) or for independent subtasks; several calls in one turn "
    "run concurrently."
)


def subagent_tool(runner: SubagentRunner, *, timeout_ms: int = 0) -> Tool[RunSubagentArgs]:
    """The ``run_subagent`` tool over ``runner``.

    Its output is the child's final answer; an aborted child gives an ``aborted`` output, a
    failed one a ``[tool error]``.  ``timeout_ms`` defaults to none (``0``): a child's run is
    bounded by its own ``max_turns``, and a timeout aborts the child like a user abort.
    """

    async def run(args: RunSubagentArgs, ctx: ToolContext) -> AsyncGenerator[ToolItem, None]:
        outcome: SubagentOutcome | None = None
        # A child is never less confined than the call that starts it (SPEC §25).
        if ctx.confinement is not None:
            PARENT_SANDBOX.set(ctx.confinement.policy)
        stream = runner.run(args.prompt, signal=ctx.signal, approve=ctx.approve)
        async with aclosing(as_agen(stream)) as items:
            async for item in items:
                if isinstance(item, SubagentOutcome):
                    outcome = item
                elif item.origin:
                    yield item
        if outcome is None:
            raise ToolError(_NO_OUTCOME)
        if outcome.status == "aborted":
            yield ToolResult(status="aborted")
        elif outcome.status == "failed":
            raise ToolError(f"subagent {outcome.session_id} failed: {outcome.error or 'unknown'}")
        else:
            yield outcome.answer

    # The runner honours the signal itself (the child ends by its own abort path, which is then
    # forwarded), so the environment lets the tool finish rather than cancelling it.
    return Tool(
        RUN_SUBAGENT,
        _DESCRIPTION,
        RunSubagentArgs,
        run,
        permission="rw",
        timeout_ms=timeout_ms,
        interruptible=False,
    )


# --------------------------------------------------------------------------- the runner

EnvironmentFactory: TypeAlias = Callable[["SubagentRunner | None"], Environment]
"""Builds a child's environment; given the runner the child may use, or ``None`` at the cap."""

_RESERVED_OPTIONS: Final = frozenset({"llm", "environment", "root", "workspace", "source"})


class SessionSubagentRunner:
    """Runs each ``run_subagent`` call as a child ``Session`` (SPEC §11).

    ``llm_factory()`` gives each child its LLM; ``environment_factory(runner)`` its environment
    (default: a ``LocalEnvironment`` with the built-in tools over ``workspace``), where
    ``runner`` is ``None`` once the child is at ``max_depth`` so that it cannot spawn.
    ``session_options`` go to ``Session.create`` (``system_prompt``, ``project``, ``agent``,
    ``compaction``, ``max_turns``, ``retry``, ``fsync``); every child is created with
    ``source="subagent"`` in ``root``.  ``on_child(session)`` is called with each child before
    it runs (e.g. to keep a handle, or to bind a scripted LLM).

    Use it as an async context manager around the parent session: the children run in its task
    group.  Leaving it aborts the children still running and waits for them.
    """

    def __init__(
        self,
        llm_factory: Callable[[], LLM],
        *,
        root: DataRoot | str | Path | None,
        workspace: str | Path,
        environment_factory: EnvironmentFactory | None = None,
        max_depth: int = 1,
        on_child: Callable[[Session], object] | None = None,
        **session_options: Any,
    ) -> None:
        if max_depth < 1:
            raise ValueError("max_depth must be at least 1")
        reserved = _RESERVED_OPTIONS.intersection(session_options)
        if reserved:
            raise TypeError(
                f"SessionSubagentRunner sets these itself: {', '.join(sorted(reserved))}"
            )
        self._llm_factory = llm_factory
        self._root = root if isinstance(root, DataRoot) else DataRoot(root)
        self._workspace = Path(workspace)
        self._environment_factory = environment_factory or self._default_environment
        self._max_depth = max_depth
        self._on_child = on_child
        self._options = session_options
        self._tg: anyio.abc.TaskGroup | None = None
        self._tg_cm: anyio.abc.TaskGroup | None = None
        self._live: set[AbortSignal] = set()
        self._order = _InOrder()

    def __repr__(self) -> str:
        return (
            f"SessionSubagentRunner(workspace={str(self._workspace)!r}, "
            f"max_depth={self._max_depth}, running={len(self._live)})"
        )

    @property
    def max_depth(self) -> int:
        return self._max_depth

    async def __aenter__(self) -> Self:
        if self._tg_cm is not None:
            raise RuntimeError("this SessionSubagentRunner is already open")
        cm = anyio.create_task_group()
        self._tg = await cm.__aenter__()
        self._tg_cm = cm
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        cm, self._tg_cm = self._tg_cm, None
        self._tg = None  # no new child from here on
        for signal in list(self._live):
            signal.abort()
        assert cm is not None
        return await cm.__aexit__(exc_type, exc, tb)

    def _default_environment(self, runner: SubagentRunner | None) -> Environment:
        from ._local import LocalEnvironment  # the environment module imports this one

        return LocalEnvironment(self._workspace, subagents=runner)

    async def run(
        self, prompt: str, *, signal: AbortSignal, approve: ApproveFn | None
    ) -> AsyncGenerator[OmniMessage | SubagentOutcome, None]:
        depth = _DEPTH.get() + 1
        if depth > self._max_depth:
            raise ToolError(DEPTH_CAP_MESSAGE.format(max_depth=self._max_depth))
        tg = self._tg
        if tg is None:
            raise ToolError(_NOT_OPEN)
        # Taken before the first await, so in the order the calls started (R-CONC-1: in call
        # order); the children announce themselves in that order (see ``_InOrder``).
        turn = self._order.take()
        try:
            async with aclosing(self._run(prompt, signal, approve, depth, turn)) as items:
                async for item in items:
                    yield item
        finally:
            self._order.done(turn)

    async def _run(
        self,
        prompt: str,
        signal: AbortSignal,
        approve: ApproveFn | None,
        depth: int,
        turn: int,
    ) -> AsyncGenerator[OmniMessage | SubagentOutcome, None]:
        child = await self._create_child(depth)
        tg = self._tg
        if tg is None:  # the runner closed while the child was being created
            async with child:  # closes its environment; nothing was written
                pass
            raise ToolError(_NOT_OPEN)
        child_signal = AbortSignal()
        forget = signal.add_callback(child_signal.abort)
        self._live.add(child_signal)
        send, recv = anyio.create_memory_object_stream[OmniMessage | SubagentOutcome](math.inf)
        done = anyio.Event()
        tg.start_soon(self._host, child, prompt, approve, child_signal, send, done, depth)
        finished = False
        try:
            async with recv:
                async for item in recv:
                    if turn >= 0 and isinstance(item, OmniMessage):
                        # The child's session_meta (R-SUB-4): the parent writes its pointer on
                        # it (R-SUB-3), so pointers follow call order, as readers assume.
                        await self._order.wait(turn)
                        yield item
                        self._order.done(turn)  # the pointer is written: the next may go
                        turn = -1
                        continue
                    yield item
            finished = True
        finally:
            if not finished:
                child_signal.abort()  # the consumer left: the child must not outlive the call
            with anyio.CancelScope(shield=True):
                await done.wait()
            forget()
            self._live.discard(child_signal)

    async def _create_child(self, depth: int) -> Session:
        from ._session import Session  # kept out of the environment's import graph

        environment = self._environment_factory(self if depth < self._max_depth else None)
        options = dict(self._options)
        parent = PARENT_SANDBOX.get()
        # A host's own child environment that confines nothing is the host's choice, as it is
        # for any session (``Session.create`` without a sandbox).
        if parent is not None and isinstance(environment, Sandboxed):
            options["sandbox"], options["network"] = parent.mode, parent.network
        try:
            llm = self._llm_factory()
            return await Session.create(
                llm=llm,
                environment=environment,
                root=self._root,
                workspace=self._workspace,
                source="subagent",
                **options,
            )
        except BaseException:
            with anyio.CancelScope(shield=True):
                await environment.aclose()
            raise

    async def _host(
        self,
        child: Session,
        prompt: str,
        approve: ApproveFn | None,
        signal: AbortSignal,
        send: MemoryObjectSendStream[OmniMessage | SubagentOutcome],
        done: anyio.Event,
        depth: int,
    ) -> None:
        """Run the child in the runner's task group and forward what it yields."""
        _DEPTH.set(depth)
        forward = _Forward(send)
        watch = _Watch(child.id)
        try:
            try:
                async with child:
                    if self._on_child is not None:
                        self._on_child(child)
                    stream = child.run(
                        [b.user_text(prompt)],
                        approve=_tagged_approve(approve, child.id),
                        signal=signal,
                    )
                    async with aclosing(stream) as messages:
                        async for msg in messages:
                            if not forward.meta_sent:
                                # R-SUB-3/4: the child's stream starts with its session_meta, which
                                # makes the parent write its pointer.  Sent once the child has
                                # written its first records, so the pointer never names a
                                # session without a trace.
                                forward.meta(child)
                            watch.see(msg)
                            forward(tag_origin(msg, child.id))
                    if not forward.meta_sent and await anyio.Path(child.trace_path).exists():
                        forward.meta(child)
                outcome = watch.outcome(signal)
            except Exception as exc:
                outcome = SubagentOutcome(
                    session_id=child.id, status="failed", error=str(exc) or type(exc).__name__
                )
            forward(outcome)
        finally:
            send.close()
            done.set()


class _InOrder:
    """Children announce themselves (their ``session_meta``) in the order their calls started,
    whatever order their sessions were created in (a thread hop each): the parent writes its
    ``subagent`` pointers in that order, and the pointer is how a reader (the span tree, the
    Web App) finds the call a child belongs to — the earliest call still running without one.
    A call that ends without a child (refused, failed, aborted) gives its turn up."""

    def __init__(self) -> None:
        self._next_ticket = 0
        self._next_turn = 0  # the earliest ticket not yet announced or given up
        self._done: set[int] = set()
        self._waiting: dict[int, anyio.Event] = {}

    def take(self) -> int:
        ticket = self._next_ticket
        self._next_ticket += 1
        return ticket

    async def wait(self, ticket: int) -> None:
        while self._next_turn < ticket:
            event = self._waiting.setdefault(ticket, anyio.Event())
            await event.wait()

    def done(self, ticket: int) -> None:
        """``ticket`` announced its child, or never will (idempotent)."""
        if ticket < self._next_turn:
            return
        self._done.add(ticket)
        while self._next_turn in self._done:
            self._done.discard(self._next_turn)
            self._next_turn += 1
        for waiting in [t for t in self._waiting if t <= self._next_turn]:
            self._waiting.pop(waiting).set()


def _tagged_approve(approve: ApproveFn | None, session_id: str) -> ApproveFn | None:
    """R-SUB-5: the parent's policy decides the child's calls, shown with their ``origin``."""
    if approve is None:
        return None
    parent = approve

    def tagged(call: OmniMessage) -> Any:
        return parent(tag_origin(call, session_id))

    return tagged


class _Forward:
    """Sends to the calling tool; once the tool has gone, the child's messages are dropped (the
    child keeps draining so that its run ends by its own abort path)."""

    def __init__(self, send: MemoryObjectSendStream[OmniMessage | SubagentOutcome]) -> None:
        self._send = send
        self._gone = False
        self.meta_sent = False

    def __call__(self, item: OmniMessage | SubagentOutcome) -> None:
        if self._gone:
            return
        try:
            self._send.send_nowait(item)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._gone = True

    def meta(self, child: Session) -> None:
        self.meta_sent = True
        self(tag_origin(child.meta, child.id))


class _Watch:
    """Reads the child's own messages for its outcome: its last answer and how its run ended."""

    def __init__(self, session_id: str) -> None:
        self._id = session_id
        self._answer: OmniMessage | None = None
        self._abort: str | None = None
        self._aborted = False
        self._in_compaction = False

    def see(self, msg: OmniMessage) -> None:
        if msg.origin is not None or is_partial(msg):
            return
        p = msg.payload
        kind = payload_type(msg)
        if kind == "compaction_begin":
            self._in_compaction = True
        elif kind == "compaction_end":
            self._in_compaction = False
        elif isinstance(p, AbortPayload):
            self._aborted = True
            self._abort = p.reason
        elif isinstance(p, TextPayload) and p.role == "assistant" and not self._in_compaction:
            self._answer = msg

    def outcome(self, signal: AbortSignal) -> SubagentOutcome:
        answer = self._answer
        text = answer.payload.text if answer and isinstance(answer.payload, TextPayload) else ""
        if self._aborted:
            reason = self._abort or mk.ABORT_BY_USER
            if reason in _INTERRUPTED:
                return SubagentOutcome(session_id=self._id, status="aborted", answer=text)
            return SubagentOutcome(session_id=self._id, status="failed", answer=text, error=reason)
        if answer is not None and stop_reason_of(answer) == "failed":
            # The max-turns notice (R-MAXT-2) is the run's last assistant text.
            return SubagentOutcome(session_id=self._id, status="failed", answer=text, error=text)
        if answer is None and signal.aborted:
            return SubagentOutcome(session_id=self._id, status="aborted")
        return SubagentOutcome(session_id=self._id, status="completed", answer=text)
