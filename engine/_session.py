"""Session: one conversation bound to a workspace, a system prompt and a model (SPEC §5).

Owns: the session lifecycle (create, resume, the task group, close), ``run()`` as an
abandon-safe async generator and the task loop (prompt, turns, compaction checks, steering,
max turns), the fail-stop end of a run, manual compaction, titles.  Does not: write records (the
``Recorder``), run request spans, approvals and tools (the ``TurnRunner``), compact (the
``CompactionRunner``), decide what the model sees (the ``projections`` fold) or format markers
(``projections.markers``).

Concurrency shape: ``run()`` starts one driver task in the session's task group and only ever
awaits the receiving end of a memory stream, so nothing yields inside a task group or cancel
scope.  The driver writes each record and pushes it onto the stream in the same synchronous
step (R-TRACE-13), so stream order equals trace order.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream

from eventstore import (
    DEFAULT_AGENT,
    DEFAULT_PROJECT,
    DataRoot,
    FsyncPolicy,
    ImageUrlPayload,
    OmniMessage,
    SessionMetaPayload,
    SettingsPayload,
    TokenCounts,
    ToolDefinition,
    TraceWriter,
)
from eventstore import builders as b
from projections import ModelContext, SessionState
from projections import markers as mk

from ._compaction import CompactionRunner
from ._config import DEFAULT_MAX_TURNS, CompactionSettings, RetryPolicy, check_workspace
from ._exceptions import SessionBroken, SessionBusy
from ._goal import GoalOptions, GoalRun
from ._images import fold_images
from ._local import LocalEnvironment
from ._mcp import McpServer, SessionTools, session_tools
from ._protocols import LLM, ApproveFn, BindsScratchpad, Environment, llm_identity
from ._recorder import Recorder, RecordListener
from ._run import Run, WriteFailed, first_write_failure, next_message
from ._sandbox import SandboxMode, SandboxPolicy, apply_sandbox, sandboxed
from ._settings import SessionOptions, feature_settings
from ._signal import AbortSignal
from ._snapshots import Snapshots, SnapshotSettings
from ._steering import Steering
from ._title import TitleCapture, generate_title
from ._turns import TurnRunner

__all__ = ["Compactability", "RecordListener", "Session"]

Compactability = Literal["ok", "unsupported", "empty", "just_compacted"]


class Session:
    """A conversation.  Use ``async with await Session.create(...) as session`` (a new one)
    or ``Session.resume(...)`` (``replay.resume_session`` does that for a recorded one)."""

    DEFAULT_COMPACTION: CompactionSettings = CompactionSettings()
    DEFAULT_RETRY: RetryPolicy = RetryPolicy()

    def __init__(
        self,
        *,
        llm: LLM,
        environment: Environment,
        root: DataRoot,
        recorder: Recorder,
        project: str,
        agent: str,
        workspace: Path,
        options: SessionOptions,
    ) -> None:
        """Internal: use ``create`` or ``resume``."""
        self._tools = environment if isinstance(environment, SessionTools) else None
        self._llm = llm
        self._env = environment
        self._root = root
        self._rec = recorder
        self._id = _meta_payload(recorder.meta).session_id
        self._project = project
        self._agent = agent
        self._workspace = workspace
        self.options = options  # what the settings records state (SPEC §23)
        self._tg: anyio.abc.TaskGroup | None = None
        self._entered = False
        self._active: Run | None = None
        self._compacting: Run | None = None
        self._busy = False
        self._broken: str | None = None
        self._steering = Steering()
        self._title = TitleCapture()
        self.title_usage: TokenCounts | None = None
        self._turns = TurnRunner(
            recorder=recorder,
            llm=llm,
            environment=environment,
            retry=options.retry,
            system_prompt=self.system_prompt,
            on_assistant_text=self._title.assistant_text,
        )
        self._compactor = CompactionRunner(
            options.compaction,
            recorder=recorder,
            turns=self._turns,
            retry=options.retry,
            context_window=llm_identity(llm)[2],
            steering_queued=lambda: bool(self._steering),
            resolve_tools=self._turns.resolve_tools,
        )

    # ------------------------------------------------------------------ creation

    @classmethod
    async def create(
        cls,
        *,
        llm: LLM,
        environment: Environment,
        root: DataRoot | str | Path | None = None,
        workspace: str | Path,
        system_prompt: str = "",
        project: str = DEFAULT_PROJECT,
        agent: str = DEFAULT_AGENT,
        compaction: CompactionSettings | None = DEFAULT_COMPACTION,
        max_turns: int = DEFAULT_MAX_TURNS,
        retry: RetryPolicy = DEFAULT_RETRY,
        fsync: FsyncPolicy = "turn",
        source: Literal["subagent", "schedule"] | None = None,
        mcp: Mapping[str, McpServer] | None = None,
        approval_rules: Mapping[str, str] | None = None,
        sandbox: SandboxMode | None = None,
        network: bool | None = None,
        snapshots: SnapshotSettings | None = None,
        thinking_level: str | None = None,
    ) -> Session:
        """A new session (R-SESSION-1): validates the workspace, allocates an id, writes nothing.
        ``mcp``: MCP servers' tools (§26); ``approval_rules``: allow/ask/deny by tool (R-MCP-3);
        ``sandbox``/``network`` set the environment's (SPEC §25; ``None``: keep its own);
        ``snapshots``: workspace snapshots (§27), off unless given."""
        data_root = root if isinstance(root, DataRoot) else DataRoot(root)
        ws = await anyio.to_thread.run_sync(check_workspace, workspace)
        apply_sandbox(environment, sandbox, network)
        environment = session_tools(environment, ws, mcp=mcp, approval_rules=approval_rules)
        recorder = _new_recorder(
            llm, data_root, ws, system_prompt, project, agent, source=source, fsync=fsync
        )
        options = SessionOptions(max_turns, compaction, retry, thinking_level, llm)
        options.extra.update(
            feature_settings(
                _policy(environment), snapshots, _tools(environment), _local_tools(environment)
            )
        )
        session = cls(
            llm=llm,
            environment=environment,
            root=data_root,
            recorder=recorder,
            project=project,
            agent=agent,
            workspace=ws,
            options=options,
        )
        session._turns.use_snapshots(Snapshots.of(snapshots, data_root, project, agent, ws))
        return session

    @classmethod
    def resume(
        cls,
        *,
        llm: LLM,
        environment: Environment,
        root: DataRoot,
        project: str,
        agent: str,
        workspace: Path,
        meta: OmniMessage,
        writer: TraceWriter,
        context: ModelContext,
        state: SessionState,
        compaction: CompactionSettings | None = DEFAULT_COMPACTION,
        max_turns: int = DEFAULT_MAX_TURNS,
        retry: RetryPolicy = DEFAULT_RETRY,
        fsync: FsyncPolicy = "turn",
        mcp: Mapping[str, McpServer] | None = None,
        approval_rules: Mapping[str, str] | None = None,
        recorded_tools: Sequence[ToolDefinition] = (),
        sandbox: SandboxMode | None = None,
        network: bool | None = None,
        snapshots: SnapshotSettings | None = None,
        thinking_level: str | None = None,
    ) -> Session:
        """A recorded session continued: its ``session_meta``, the ``writer`` holding the lock
        on its latest file, and the ``context``/``state`` folded from its trace (with the
        closures resume wrote).  The records that follow go to ``writer``'s file.  With ``mcp``,
        ``recorded_tools`` keeps the tools of a server that is gone (they fail, R-MCP-4)."""
        apply_sandbox(environment, sandbox, network)
        environment = session_tools(
            environment, workspace, mcp=mcp, approval_rules=approval_rules, recorded=recorded_tools
        )
        session_id = _meta_payload(meta).session_id
        recorder = Recorder(
            session_id=session_id,
            meta=meta,
            trace_path=writer.path,
            fsync=fsync,
            writer=writer,
            context=context,
            state=state,
        )
        options = SessionOptions(max_turns, compaction, retry, thinking_level, llm)
        options.extra.update(
            feature_settings(
                _policy(environment), snapshots, _tools(environment), _local_tools(environment)
            )
        )
        session = cls(
            llm=llm,
            environment=environment,
            root=root,
            recorder=recorder,
            project=project,
            agent=agent,
            workspace=workspace,
            options=options,
        )
        session._turns.use_snapshots(Snapshots.of(snapshots, root, project, agent, workspace))
        return session

    # ------------------------------------------------------------------ context manager

    async def __aenter__(self) -> Self:
        if self._entered:
            raise RuntimeError("a Session can be entered once")
        self._entered = True
        self._tg_cm = anyio.create_task_group()
        self._tg = await self._tg_cm.__aenter__()
        _bind(self._env, self._root, self._rec, self._project, self._agent)
        if self._tools is not None:  # its MCP connections are tasks of the session's scope
            await _entered(self._tools.open(), self._tg_cm)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        # R-SESSION-2: abort a running task (or manual compaction), wait for every tool task,
        # close everything.
        active = self._active or self._compacting
        if active is not None:
            active.signal.abort()
        try:
            with anyio.CancelScope(shield=True):
                if active is not None:
                    await active.done.wait()
        finally:
            try:
                try:
                    if self._tools is not None:  # closed first, in the task that opened them
                        await self._tools.close()
                finally:
                    result = await self._tg_cm.__aexit__(exc_type, exc, tb)
            finally:
                self._tg = None
                self._rec.close()
                with anyio.CancelScope(shield=True):
                    await self._env.aclose()
        return result

    # ------------------------------------------------------------------ properties

    @property
    def id(self) -> str:
        return self._id

    @property
    def trace_path(self) -> Path:
        return self._rec.trace_path

    @property
    def context(self) -> ModelContext:
        return self._rec.context

    @property
    def state(self) -> SessionState:
        return self._rec.state

    @property
    def workspace(self) -> Path:
        return self._workspace

    @property
    def meta(self) -> OmniMessage:
        """The session's ``session_meta`` record (written first in every trace file)."""
        return self._rec.meta

    @property
    def system_prompt(self) -> str:
        return _meta_payload(self._rec.meta).system_prompt

    @property
    def scratchpad(self) -> Path:
        return self._root.scratchpad(self._id, project=self._project, agent=self._agent)

    def _scratchpad_dir(self) -> Path:
        """The scratchpad, created on demand with 0700 directories (R-IMG-1, R-ROOT-9)."""
        return self._root.ensure_dir(self.scratchpad)

    def settings(self, approve: ApproveFn | None = None) -> SettingsPayload:
        """What a run with ``approve`` (``None``: the recorded mode) records (R-SET-1)."""
        return self.options.for_run(self._rec.state.settings, approve, None)[0]

    @property
    def sandbox(self) -> SandboxPolicy | None:  # SPEC §25; None: the environment has none
        return None if (box := sandboxed(self._env)) is None else box.sandbox

    @property
    def running(self) -> bool:
        return self._active is not None

    @property
    def broken(self) -> bool:
        return self._broken is not None

    def add_record_listener(self, listener: RecordListener) -> Callable[[], None]:
        """Call ``listener(record, file)`` after every record this session writes, in trace
        order and in the writing task (the server tags streamed messages with trace positions
        this way).  Returns a function that removes it.  A listener must not raise or block."""
        return self._rec.add_listener(listener)

    def add_backoff_listener(self, listener: Callable[[int], None]) -> Callable[[], None]:
        """Call ``listener(delay_ms)`` each time a reconnect backoff (of a turn or of a
        compaction, R-RETRY-3, R-COMPACT-19) starts, in the waiting task, before it waits: a
        host can show the countdown, a golden replay fires a recorded abort there (R-GOLD-2).
        Returns a function that removes it.  A listener must not raise or block."""
        return self._turns.add_backoff_listener(listener)

    def skip_reconnect_wait(self) -> bool:
        """End the backoff in progress as if its timer had elapsed (R-RETRY-12)."""
        return self._turns.skip_wait()

    # ------------------------------------------------------------------ run

    def _check_idle(self) -> None:
        if self._broken is not None:
            raise SessionBroken(session_id=self._id, cause=self._broken)
        if self._busy:
            raise SessionBusy(session_id=self._id)
        if self._tg is None:
            raise RuntimeError(
                "use the session inside `async with` (the session owns a task group)"
            )

    async def run(
        self,
        messages: Sequence[OmniMessage] | None = (),
        *,
        approve: ApproveFn | None = None,
        signal: AbortSignal | None = None,
        thinking_level: str | None = None,
        goal: GoalOptions | None = None,
        observer: Callable[[OmniMessage], None] | None = None,
    ) -> AsyncGenerator[OmniMessage, None]:
        """Drive one task and yield its messages (R-RUN-1).  Safe to abandon (R-CARRY-2).

        ``goal``: a goal's rounds, each an ordinary task (SPEC §18).  ``observer(msg)`` sees each
        message as emitted (before it is yielded); must not block; if it raises, run() does too."""
        self._check_idle()
        goal_run = GoalRun.prepare(_GoalSeams(self), messages, goal) if goal is not None else None
        self._busy = True
        # R-SET-3: what the run does not pass, the session's (recorded) settings give.
        settings, approve, thinking_level = self.options.for_run(
            self._rec.state.settings, approve, thinking_level
        )
        approve = self._tools.approve(approve) if self._tools is not None else approve
        run, recv, forget = _new_run(signal, approve, thinking_level, observer, settings)
        self._active = run
        assert self._tg is not None
        work = self._task(run, list(messages or ())) if goal_run is None else goal_run.drive(run)
        self._tg.start_soon(self._drive, run, work)
        finished = False
        try:
            async with recv:
                while (msg := await next_message(recv)) is not None:
                    yield msg
            finished = True
            if run.error is not None:
                raise run.error
        finally:
            if not finished:
                run.consumer_gone = True
                run.signal.abort()
            with anyio.CancelScope(shield=True):
                await run.done.wait()
            forget()

    async def _drive(self, run: Run, work: Awaitable[object], *, store_error: bool = False) -> None:
        """Run ``work`` (a task, a goal or a manual compaction) in the session's task group; a
        write failure ends it by the fail-stop path, raised as the store's error when
        ``store_error`` (``compact()``)."""
        try:
            await work
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            failure = first_write_failure(exc)
            if failure is None:
                run.error = exc
            else:
                self._end_by_write_failure(run, failure)
                if store_error:
                    run.error = failure.cause
        finally:
            self._steering.clear()  # R-CARRY-11
            self._title.task_ended()
            self._active = self._compacting = None
            self._busy = False
            run.send.close()
            run.done.set()
            if self._broken is not None:
                self._rec.close()

    def _end_by_write_failure(self, run: Run, failure: WriteFailed) -> None:
        """R-TRACE-15/15a: one last ``abort``, attempted once, then the session is broken."""
        run.signal.abort()
        msg, broken = self._rec.record_last_abort(failure)
        self._broken = broken or self._broken
        run.push(msg)

    def _emit(self, run: Run, msg: OmniMessage) -> None:
        self._rec.emit(msg, run.push)

    async def _task(self, run: Run, prompt: list[OmniMessage]) -> None:
        if not self._llm.vision and any(isinstance(m.payload, ImageUrlPayload) for m in prompt):
            prompt = fold_images(prompt, self._scratchpad_dir())  # R-RUN-4, R-IMG-4
        await self._turns.resolve_tools()
        # R-SET-2: before the input of a run whose settings differ from the recorded ones.
        if run.settings is not None:
            self._rec.record_settings(
                run.settings, timestamp=prompt[0].timestamp if prompt else None
            )
        # R-RUN-5/6: pending summary, then the prompt, then (first run) tool_list_ready.
        summary = self._rec.context.pending_summary
        if summary is not None:
            self._rec.record(summary)
        for msg in prompt:
            self._rec.record(msg)
        self._title.prompt(prompt)
        self._rec.emit_tool_list(run.push)
        if run.signal.aborted:  # R-RUN-7
            self._emit(run, b.abort(mk.ABORT_BY_USER))
            return
        await self._turns.loop(run, self.options.max_turns, self._between_turns)
        await self._turns.snapshot_at_run_end(run)

    async def _between_turns(self, run: Run, called: bool) -> bool:
        """After a completed turn: the compaction check (R-RUN-18), then steering (R-STEER-4);
        whether the task goes on."""
        outcome = await self._compactor.after_turn(run, mid_task=called or bool(self._steering))
        if outcome == "stop":
            return False
        scratchpad = None if self._llm.vision else self._scratchpad_dir
        delivered = self._steering.deliver(lambda m: self._emit(run, m), scratchpad=scratchpad)
        if outcome == "continued" or called or delivered:
            return True
        await self._compactor.at_task_end(run)
        return False

    # ------------------------------------------------------------------ steering

    def steer(self, messages: Sequence[OmniMessage]) -> bool:
        """Queue steering for the running task (R-STEER-1…3).  ``False`` when no run is active."""
        if self._active is None or self._broken is not None:
            return False
        self._steering.add(messages)
        return True

    # ------------------------------------------------------------------ compaction

    def compactability(self) -> Compactability:
        """R-COMPACT-25."""
        return self._compactor.compactability()

    async def compact(
        self,
        *,
        signal: AbortSignal | None = None,
        on_message: Callable[[OmniMessage], None] | None = None,
    ) -> str | None:
        """Manual compaction between runs (R-COMPACT-26).  Returns the ``compaction_end``
        status, or ``None`` when the context is not compactable (nothing is written)."""
        return await _manual_compaction(self, signal, on_message)

    # ------------------------------------------------------------------ titles

    async def generate_title(self) -> str | None:
        """One out-of-band request for a short title (R-TITLE-1…4); never recorded."""
        title, usage = await generate_title(self._llm, self._title.user, self._title.assistant)
        if usage is not None:
            self.title_usage = usage
        return title


class _GoalSeams:
    """A session as a ``GoalHost``: the few things a goal run may do with it."""

    __slots__ = ("_session",)

    def __init__(self, session: Session) -> None:
        self._session = session

    @property
    def id(self) -> str:
        return self._session.id

    @property
    def state(self) -> SessionState:
        return self._session.state

    @property
    def scratchpad(self) -> Path:
        return self._session.scratchpad

    def scratchpad_dir(self) -> Path:
        return self._session._scratchpad_dir()

    def write_private(self, path: Path, data: bytes) -> Path:
        return self._session._root.write_private(path, data)

    def add_record_listener(self, listener: RecordListener) -> Callable[[], None]:
        return self._session.add_record_listener(listener)

    async def task(self, run: Run, prompt: list[OmniMessage]) -> None:
        await self._session._task(run, prompt)

    def emit(self, run: Run, msg: OmniMessage) -> None:
        self._session._emit(run, msg)


async def _manual_compaction(
    session: Session, signal: AbortSignal | None, on_message: Callable[[OmniMessage], None] | None
) -> str | None:
    """``Session.compact``'s body (kept out of the class, which stays under 400 lines)."""
    session._check_idle()
    if session.compactability() != "ok":
        return None
    session._busy = True
    run, recv, forget = _new_run(signal, None, None)
    run.consumer_gone = True
    recv.close()
    status: list[str] = []
    assert session._tg is not None

    async def manual() -> None:
        status.append(await session._compactor.manual(run, on_message))

    # The compaction runs in the session's task group, as a run's driver does, so that a
    # cancelled caller ends it exactly like an abort (R-COMPACT-26, R-COMPACT-18).
    session._compacting = run
    session._tg.start_soon(functools.partial(session._drive, run, manual(), store_error=True))
    try:
        await run.done.wait()
    except BaseException:
        run.signal.abort()
        with anyio.CancelScope(shield=True):
            await run.done.wait()
        raise
    finally:
        forget()
    if run.error is not None:
        raise run.error
    return status[0] if status else "aborted"


def _new_run(
    signal: AbortSignal | None,
    approve: ApproveFn | None,
    thinking_level: str | None,
    observer: Callable[[OmniMessage], None] | None = None,
    settings: SettingsPayload | None = None,
) -> tuple[Run, MemoryObjectReceiveStream[OmniMessage], Callable[[], None]]:
    """A new run with its own signal, which ``signal`` (the caller's) also fires."""
    internal = AbortSignal()
    forget = signal.add_callback(internal.abort) if signal is not None else (lambda: None)
    send, recv = anyio.create_memory_object_stream[OmniMessage](math.inf)
    run = Run(send=send, signal=internal, approve=approve, thinking_level=thinking_level)
    run.observer = observer
    run.settings = b.settings(settings) if settings is not None else None
    return run, recv, forget


def _new_recorder(
    llm: LLM,
    root: DataRoot,
    workspace: Path,
    system_prompt: str,
    project: str,
    agent: str,
    *,
    source: Literal["subagent", "schedule"] | None,
    fsync: FsyncPolicy,
) -> Recorder:
    """The record path of a new session: its id, ``session_meta`` and first file (R-ROOT-3/4)."""
    now = _dt.datetime.now()
    session_id = root.new_session_id(now)
    date_dir = now.date().isoformat()  # R-ROOT-3: the same local date as the id
    provider, model_id, window = llm_identity(llm)
    meta = b.session_meta(
        session_id=session_id,
        provider=provider,
        model_id=model_id,
        model_context_window=window if window is not None else "unknown",
        system_prompt=system_prompt,
        agent_state=str(root.agent_state(project, agent)),
        workspace=str(workspace),
        source=source,
    )
    path = root.trace_path(session_id, 1, project=project, agent=agent, date=date_dir)
    return Recorder(session_id=session_id, meta=meta, trace_path=path, fsync=fsync)


def _tools(environment: object) -> SessionTools | None:
    return environment if isinstance(environment, SessionTools) else None


def _local_tools(environment: object) -> list[str] | None:
    """The names of the environment's own tools (MCP servers' aside), when it lists them."""
    primary = environment.primary if isinstance(environment, SessionTools) else environment
    if not isinstance(primary, LocalEnvironment):
        return None
    return [tool.name for tool in primary.tools]


def _policy(environment: object) -> SandboxPolicy | None:
    return None if (box := sandboxed(environment)) is None else box.sandbox


def _meta_payload(meta: OmniMessage) -> SessionMetaPayload:
    payload = meta.payload
    assert isinstance(payload, SessionMetaPayload)
    return payload


async def _entered(step: Coroutine[Any, Any, None], tg_cm: Any) -> None:
    """``step`` (opening the session's tools); if it fails, the session's task group is left
    before the error is raised."""
    try:
        await step
    except BaseException as exc:
        await tg_cm.__aexit__(type(exc), exc, exc.__traceback__)
        raise


def _bind(env: Environment, root: DataRoot, rec: Recorder, project: str, agent: str) -> None:
    """Tell the environment the session's scratchpad and, if it has a sandbox, the data root."""
    if isinstance(env, BindsScratchpad):
        sid = _meta_payload(rec.meta).session_id
        env.bind_scratchpad(root.scratchpad(sid, project=project, agent=agent))
    box = sandboxed(env)
    if box is not None:
        own = functools.partial(_own_trace_files, root, rec, project, agent)
        box.bind_session(data_root=root.home, own_files=own)


def _own_trace_files(root: DataRoot, rec: Recorder, project: str, agent: str) -> list[Path]:
    """The session's trace files, which its sandboxed tools may read (R-BOX-1)."""
    try:
        return root.trace_files(_meta_payload(rec.meta).session_id, project=project, agent=agent)
    except (OSError, LookupError, ValueError):
        return [rec.trace_path]
