"""The session host: sessions in memory, one task or compaction at a time (R-SRV-3…5, R-SRV-14).

Owns: finding a session (hosted, or on disk and resumed on first use), loading it under the
host's task group (each loaded ``Session`` is entered by a holder task that lives until the
session is unloaded), starting tasks and compactions (the one-at-a-time check is synchronous,
so N concurrent requests give exactly one winner), approvals (``ask`` waits for
``decide``), abort, steering, retry-now, titles, fork, delete, and shutdown (abort every task as
a user abort would, then close); releasing an idle session's lock (issue 29: unloaded after
``idle_release`` seconds without use, so a CLI ``resume`` can take it; loaded again on use)
and publishing what another process appended to an unloaded session (``catch_up``).  Does not:
speak HTTP or read pages of traces (``_traces``).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack, aclosing
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Protocol

import anyio
import anyio.abc

from engine import (
    LLM,
    AbortSignal,
    CompactionSettings,
    Environment,
    GoalOptions,
    LocalEnvironment,
    McpServer,
    RetryPolicy,
    SandboxMode,
    SandboxUnavailable,
    Session,
    SnapshotSettings,
    SubagentRunner,
    check_workspace,
)
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import (
    DEFAULT_AGENT,
    DEFAULT_PROJECT,
    DataRoot,
    FsyncPolicy,
    OmniMessage,
    SessionLocked,
    SessionMetaPayload,
    TailRead,
    file_index,
    iter_trace,
    mark_archived,
    tail,
    validate_id,
)
from eventstore.builders import restamped
from penguin._goal import GoalRounds
from penguin._setup import Overrides, Resolved, open_session, resolve
from penguin._subagents import Subagents, SubagentsUnavailable, build_subagents
from replay import fork_session, load_session

from . import _controls as controls
from ._channel import BufferPool, Channel
from ._exceptions import ApiError
from ._hosted import ApprovalMode, Hosted, Writes
from ._traces import indexed_files, last_position

__all__ = ["EnvironmentFactory", "LLMFactory", "SessionHost"]

LLMFactory = Callable[[str | None], LLM]
"""Builds the model of one session; called with the model a client asked for (or ``None``)."""
EnvironmentFactory = Callable[..., Environment]
"""Builds a session's environment: ``(llm, workspace)``, and ``subagents=`` a
``SubagentRunner`` for a session that offers ``run_subagent`` (a factory without that keyword
cannot host such sessions)."""

log = logging.getLogger("penguin.server")

# How long a loaded session may sit unused before its lock is released (issue 29).  Short, so a
# user who moves from the Web App to ``penguin resume`` is not refused; loading it again costs
# one resume of the latest trace file.
IDLE_RELEASE_S: Final = 5.0


def default_llm(model: str | None) -> LLM:
    """No model was chosen: refuse, never fall back to a demo script that runs real tools."""
    raise ApiError(
        409,
        "no_model",
        "this server has no model: start it with one (penguin serve --llm/--model or --script)"
        " or pass llm_factory to create_app",
    )


def default_environment(
    llm: LLM, workspace: Path, *, subagents: SubagentRunner | None = None
) -> Environment:
    if isinstance(llm, ScriptedLLM) and llm.script.tools:
        return ScriptedEnvironment.from_llm(llm)
    return LocalEnvironment(workspace, subagents=subagents)


async def _close_llm(llm: Any) -> None:
    aclose = getattr(llm, "aclose", None)
    if callable(aclose):
        with anyio.CancelScope(shield=True):
            await aclose()


class Tracing(Protocol):
    """What the host needs of an exporter of sessions as spans (``replay.otel.LiveExport``)."""

    def listener(self, session_id: str) -> Callable[[OmniMessage, Path], None]: ...

    def end(self, session_id: str) -> None: ...


def _traced(
    session: Session, sid: str, tracing: Tracing, forget: Callable[[], None]
) -> Callable[[], None]:
    """Also feed ``tracing`` the session's records; the returned function stops both and ends
    the session's open spans (the host lets the session go)."""
    forget_spans = session.add_record_listener(tracing.listener(sid))

    def forget_both() -> None:
        forget()
        forget_spans()
        tracing.end(sid)

    return forget_both


class SessionHost:
    """Hosts sessions of one data root.  Enter it (``async with``) around serving."""

    def __init__(
        self,
        root: DataRoot,
        *,
        llm_factory: LLMFactory | None = None,
        environment_factory: EnvironmentFactory | None = None,
        workspace: Path | None = None,
        approval: ApprovalMode = "ask",
        buffer_events: int = 10_000,
        buffer_bytes: int = 8 * 2**20,
        on_state: Callable[[Hosted], None] | None = None,
        on_created: Callable[[str, str], None] | None = None,
        retry: RetryPolicy | None = None,
        fsync: FsyncPolicy = "turn",
        idle_release: float | None = IDLE_RELEASE_S,
        buffer_pool_bytes: int = 256 * 2**20,
        mcp_servers: Mapping[str, McpServer] | None = None,
        snapshots: bool = True,
        tracing: Tracing | None = None,
        subagents: bool = False,
    ) -> None:
        self.root = root
        # New sessions offer run_subagent unless the client says otherwise (off by default:
        # a subagent runs the model and tools again, so a person opts in).
        self.subagents = subagents
        self._tracing = tracing  # ``--otlp``: spans of the sessions, sent as records arrive
        self._snapshots = SnapshotSettings() if snapshots else None
        self.mcp_servers = dict(mcp_servers or {})  # config.toml's: a session's default
        self.buffers = BufferPool(buffer_pool_bytes)
        self.writes = Writes()  # every record the hosted sessions wrote (ServerContext reads it)
        self._idle_release = idle_release
        self._used: dict[str, float] = {}
        self._cursors: dict[str, TailRead | None] = {}  # where each trace was last read
        self._releaser: anyio.CancelScope | None = None
        self._fsync: FsyncPolicy = fsync
        self._retry = retry or Session.DEFAULT_RETRY
        self._llm_factory = llm_factory or default_llm
        self._env_factory = environment_factory or default_environment
        self.workspace = workspace or Path.cwd()
        self.approval: ApprovalMode = approval
        self._buffer = (buffer_events, buffer_bytes)
        self._hosted: dict[str, Hosted] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._tg_cm: Any = None
        self.accepting = True
        self._on_state = on_state or (lambda h: None)
        self._on_created = on_created or (lambda sid, source: None)

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> SessionHost:
        self._tg_cm = anyio.create_task_group()
        self._tg = await self._tg_cm.__aenter__()
        if self._idle_release is not None:
            self._tg.start_soon(self._release_idle, self._idle_release)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        with anyio.CancelScope(shield=True):
            await self.shutdown()
        try:
            return bool(await self._tg_cm.__aexit__(exc_type, exc, tb))
        finally:
            self._tg = None

    def begin_shutdown(self, then: Callable[[], None] = lambda: None) -> None:
        """Refuse new tasks, abort running ones (as a user abort would), and once they have
        ended (their last records streamed) end the streams and call ``then``."""
        self.accepting = False
        for h in list(self._hosted.values()):
            controls.abort(h)
        if self._tg is not None:
            self._tg.start_soon(self._close_streams, then)

    async def _close_streams(self, then: Callable[[], None]) -> None:
        with anyio.move_on_after(8):
            for h in list(self._hosted.values()):
                while h.busy is not None:
                    await h.idle.wait()
        for h in list(self._hosted.values()):
            h.channel.close()
        then()

    async def shutdown(self) -> None:
        """R-SRV-14: stop accepting tasks, abort running ones as a user abort would, close."""
        self.accepting = False
        if self._releaser is not None:
            self._releaser.cancel()
        for h in list(self._hosted.values()):
            controls.abort(h)
        for h in list(self._hosted.values()):
            await self._unload(h)
            h.channel.close()

    @property
    def hosted(self) -> dict[str, Hosted]:
        return self._hosted

    def _group(self) -> anyio.abc.TaskGroup:
        if self._tg is None:
            raise ApiError(503, "not_ready", "the server is not running")
        return self._tg

    # ------------------------------------------------------------------ finding

    def _new_hosted(self, sid: str, project: str, agent: str, start: tuple[int, int]) -> Hosted:
        events, size = self._buffer
        channel = Channel(
            start,
            restored=start != (0, 0),
            max_events=events,
            max_bytes=size,
            pool=self.buffers,
        )
        h = Hosted(sid, project, agent, channel, approval=self.approval, writes=self.writes)
        h.position = start
        self._hosted[sid] = h
        return h

    async def get(self, session_id: str) -> Hosted:
        """The hosted session, made from its trace when not in memory (404 when unknown)."""
        h = self._hosted.get(session_id)
        if h is not None:
            return h
        try:
            validate_id(session_id, what="session id")
            loc = self.root.locate(session_id)
            files = self.root.trace_files(session_id, project=loc.project, agent=loc.agent)
        except (ValueError, FileNotFoundError, OSError):
            raise ApiError(404, "session_not_found", "no such session") from None
        except LookupError:
            raise ApiError(409, "ambiguous_session", "the id exists under two agents") from None
        start = await anyio.to_thread.run_sync(last_position, files)
        h = self._hosted.get(session_id)  # another request may have made it meanwhile
        if h is not None:
            return h
        return self._new_hosted(session_id, loc.project, loc.agent, start)

    # ------------------------------------------------------------------ loading

    async def create(
        self,
        *,
        workspace: Path | None,
        system_prompt: str,
        model: str | None,
        approval: ApprovalMode,
        compaction: CompactionSettings | None,
        max_turns: int,
        project: str = DEFAULT_PROJECT,
        agent: str = DEFAULT_AGENT,
        sandbox: SandboxMode | None = None,
        network: bool | None = None,
        mcp: Mapping[str, McpServer] | None = None,
        approval_rules: Mapping[str, str] | None = None,
        subagents: bool | None = None,
    ) -> Hosted:
        if not self.accepting:
            raise ApiError(503, "shutting_down", "the server is shutting down")
        ws = workspace if workspace is not None else self.workspace
        try:
            check_workspace(ws)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise ApiError(400, "workspace_not_found", str(exc)) from None
        llm = self._llm_factory(model)
        overrides = Overrides(
            approval=approval,
            max_turns=max_turns,
            compaction=None if compaction is None else compaction.model_dump(),
            compaction_off=compaction is None,
            mcp=mcp,
            approval_rules=approval_rules,
            subagents=subagents,
        )
        resolved = resolve(
            None,
            overrides,
            default_approval=approval,
            default_retry=self._retry,
            configured_mcp=self.mcp_servers,
            default_subagents=self.subagents,
        )
        try:
            children = _subagent_host(self, llm, resolved, model, ws, project, agent)
        except ApiError:
            await _close_llm(llm)
            raise
        try:
            session = await open_session(
                self.root,
                llm=llm,
                environment=_environment(self._env_factory, children),
                resolved=resolved,
                workspace=ws,
                system_prompt=system_prompt,
                project=project,
                agent=agent,
                fsync=self._fsync,
                sandbox=sandbox,
                network=network,
                snapshots=self._snapshots,
            )
        except SandboxUnavailable as exc:  # R-BOX-2: the session does not start
            await _close_llm(llm)
            raise ApiError(409, "sandbox_unavailable", str(exc)) from None
        except (FileNotFoundError, NotADirectoryError) as exc:
            # Gone between the check and the session's own (the same check, R-SESSION-1).
            await _close_llm(llm)
            raise ApiError(400, "workspace_not_found", str(exc)) from None
        h = self._new_hosted(session.id, project, agent, (0, 0))
        h.approval, h.overrides, h.model = approval, overrides, model
        h.sandbox = None if session.sandbox is None else session.sandbox.settings()
        await self._hold(h, session, llm, children)
        self._on_created(h.id, "server")
        return h

    async def _load(self, h: Hosted) -> Session:
        session = h.session
        if session is not None and not h.closing.is_set():
            return session
        async with h.load_lock:
            if h.session is not None and h.closing.is_set():
                with anyio.CancelScope(shield=True):
                    await h.closed.wait()  # being released: load it again below
            if h.session is not None:
                return h.session
            files = self.root.trace_files(h.id, project=h.project, agent=h.agent)
            workspace = await anyio.to_thread.run_sync(_recorded_workspace, files)
            resolved = await _recorded(self.root, h, self)
            llm = _make_llm(self._llm_factory, h.model, resolved.model)
            try:
                # R-SET-3: a session recorded with run_subagent offers it again.
                children = _subagent_host(
                    self, llm, resolved, h.model, workspace, h.project, h.agent
                )
                session = await open_session(
                    self.root,
                    llm=llm,
                    environment=_environment(self._env_factory, children),
                    resolved=resolved,
                    session_id=h.id,
                    workspace=workspace,
                    project=h.project,
                    agent=h.agent,
                    fsync=self._fsync,
                    **({} if h.sandbox is None else _box_options(h.sandbox)),
                    # The server's snapshot setting: a session keeps its recorded one (R-SET-3).
                    defaults={"snapshots": self._snapshots},
                )
            except SandboxUnavailable as exc:
                await _close_llm(llm)
                raise ApiError(409, "sandbox_unavailable", str(exc)) from None
            except SessionLocked as exc:
                await _close_llm(llm)
                who = f"process {exc.holder_pid}" if exc.holder_pid else "another process"
                raise ApiError(409, "session_locked", f"the session is held by {who}") from None
            except (FileNotFoundError, NotADirectoryError) as exc:
                await _close_llm(llm)
                raise ApiError(409, "workspace_not_found", str(exc)) from None
            except BaseException:
                await _close_llm(llm)
                raise
            # Resume may have closed a dangling span (R-RESUME-14a), and another process may
            # have written while the session was not loaded: those records are the stream's
            # too, published before anything the loaded session writes.
            h.position = await self._publish_new(h)
            await self._hold(h, session, llm, children)
            return session

    async def _publish_new(self, h: Hosted) -> tuple[int, int]:
        """Publish the records of ``h``'s trace after the last one its channel carried;
        returns the trace's last position.  Reads only what was appended since the previous
        call (``eventstore.tail`` from a kept cursor), so following a long CLI run stays cheap."""
        files = self.root.trace_files(h.id, project=h.project, agent=h.agent)
        since = h.channel.last_record
        cursor = self._cursors.get(h.id)

        def read() -> tuple[list[tuple[int, int, OmniMessage]], TailRead | None]:
            new: list[tuple[int, int, OmniMessage]] = []
            last = cursor
            for index, path in indexed_files(files):
                if last is not None and index < (file_index(last.path) or 0):
                    continue
                if last is not None and last.path == path:
                    got = last.more()
                elif index < since[0]:
                    continue
                else:
                    got = tail(path)
                new += [(r.file, r.ordinal, r.record) for r in got.records]
                last = got
            return new, last

        records, self._cursors[h.id] = await anyio.to_thread.run_sync(read)
        upto = since
        for f, o, rec in records:
            if (f, o) > since:
                h.channel.publish_record(rec, f, o)
                upto = (f, o)
        cur = self._cursors[h.id]
        if cur is not None and cur.ordinal and (file_index(cur.path) or 0, cur.ordinal - 1) > upto:
            upto = (file_index(cur.path) or 0, cur.ordinal - 1)
        return upto

    async def catch_up(self, session_id: str) -> None:
        """Another process appended to ``session_id``'s trace: when the session is hosted but
        not loaded here (a CLI run holds it), stream the new records live (issue 29)."""
        h = self._hosted.get(session_id)
        if h is None or h.session is not None or h.load_lock.locked():
            return
        async with h.load_lock:
            if h.session is not None:
                return
            try:
                await self._publish_new(h)
            except FileNotFoundError:
                return

    def touch(self, h: Hosted) -> None:
        self._used[h.id] = anyio.current_time()

    async def _release_idle(self, idle: float) -> None:
        """Unload sessions unused for ``idle`` seconds: their lock is free for other processes
        (a CLI ``resume``); the next use loads them again from the trace."""
        with anyio.CancelScope() as self._releaser:
            await self._release_loop(idle)

    async def _release_loop(self, idle: float) -> None:
        while True:
            await anyio.sleep(max(idle / 2, 0.05))
            for h in list(self._hosted.values()):
                if not _releasable(h, idle, self._used.get(h.id, 0.0)) or h.load_lock.locked():
                    continue
                async with h.load_lock:
                    if _releasable(h, idle, self._used.get(h.id, 0.0)):
                        log.debug("releasing idle session %s", h.id)
                        await self._unload(h)

    async def _hold(
        self, h: Hosted, session: Session, llm: LLM, children: Subagents | None = None
    ) -> None:
        h.closing, h.closed = anyio.Event(), anyio.Event()
        if isinstance(llm, ScriptedLLM):
            llm.bind(session)
        h.forget_listener = session.add_record_listener(h.on_record)
        if self._tracing is not None:
            h.forget_listener = _traced(session, h.id, self._tracing, h.forget_listener)
        h.session, h.llm = session, llm
        h.subagents = children is not None
        self.touch(h)
        await self._group().start(self._holder, h, session, llm, children)

    async def _holder(
        self,
        h: Hosted,
        session: Session,
        llm: LLM,
        children: Subagents | None,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            async with AsyncExitStack() as stack:
                if children is not None:
                    # Entered before the session and left after it: the children run in the
                    # runner's task group, and leaving it aborts any still running.
                    await stack.enter_async_context(children.runner)
                await stack.enter_async_context(session)
                task_status.started()
                await h.closing.wait()
        finally:
            with anyio.CancelScope(shield=True):
                if h.forget_listener is not None:
                    h.forget_listener()
                    h.forget_listener = None
                h.flush()
                if h.session is session:
                    h.session, h.llm = None, None
                await _close_llm(llm)
                if children is not None:
                    await children.aclose()
                h.closed.set()

    async def _unload(self, h: Hosted) -> None:
        if h.session is None:
            return
        h.closing.set()
        with anyio.CancelScope(shield=True):
            await h.closed.wait()

    # ------------------------------------------------------------------ tasks

    def _claim(self, h: Hosted, kind: Literal["task", "compaction"]) -> None:
        if not self.accepting:
            raise ApiError(503, "shutting_down", "the server is shutting down")
        if h.busy == "task":
            raise ApiError(409, "task_in_progress", "a task is running in this session")
        if h.busy == "compaction":
            raise ApiError(409, "compacting", "the session is compacting")
        h.busy = kind

    async def start_task(
        self,
        h: Hosted,
        messages: Sequence[OmniMessage],
        *,
        thinking_level: str | None,
        goal: GoalOptions | None = None,
    ) -> str:
        self._claim(h, "task")
        try:
            session = await self._load(h)
            if session.broken:
                raise ApiError(
                    409, "session_broken", "the session's trace can no longer be written"
                )
        except BaseException:
            h.busy = None
            raise
        # R-SET-6: derived from the trace (the runs it holds), so ids go on across restarts.
        task_id = f"{h.id}.{session.state.runs + 1}"
        h.signal = AbortSignal()
        self.announce(h)
        self._group().start_soon(self._run_task, h, session, list(messages), thinking_level, goal)
        return task_id

    async def _run_task(
        self,
        h: Hosted,
        session: Session,
        messages: list[OmniMessage],
        thinking_level: str | None,
        goal: GoalOptions | None = None,
    ) -> None:
        try:
            # Published as the engine emits each message: under load a record then waits for
            # one pass of the event loop (to the writers), not two (to this loop, then to them).
            # R-SET-6: the input is stamped when it is written, after any closure record the
            # resume wrote (not when the request arrived).
            messages = [restamped(m) for m in messages]
            stream = session.run(
                messages,
                approve=controls.approver(h, self.announce),
                signal=h.signal,
                thinking_level=thinking_level,
                goal=goal,
                observer=h.publisher(GoalRounds() if goal is not None else None),
            )
            async with aclosing(stream) as it:
                async for _ in it:
                    pass
        except Exception as exc:
            log.exception("task of session %s failed", h.id)
            h.flush()
            h.server_event("task_error", message=type(exc).__name__)
        finally:
            h.flush()
            self._finish(h)

    def _finish(self, h: Hosted) -> None:
        h.channel.end_segments()
        for pending in h.pending.values():
            pending.decision = "deny"
            pending.done.set()
        h.pending.clear()
        h.busy, h.signal, h.queued_steering = None, None, 0
        self.touch(h)
        self.announce(h)
        idle, h.idle = h.idle, anyio.Event()
        idle.set()

    def announce(self, h: Hosted) -> None:
        h.announce_state()
        self._on_state(h)

    # ------------------------------------------------------------------ compaction, title

    async def start_compaction(self, h: Hosted) -> None:
        self._claim(h, "compaction")
        try:
            session = await self._load(h)
            verdict = session.compactability()
            if verdict != "ok":
                raise ApiError(409, verdict, f"the session cannot be compacted now ({verdict})")
        except BaseException:
            h.busy = None
            raise
        h.signal = AbortSignal()
        self.announce(h)
        self._group().start_soon(self._run_compaction, h, session)

    async def _run_compaction(self, h: Hosted, session: Session) -> None:
        try:
            await session.compact(signal=h.signal, on_message=h.publish)
        except Exception:
            log.exception("compaction of session %s failed", h.id)
            h.server_event("task_error", message="compaction failed")
        finally:
            h.flush()
            self._finish(h)

    async def title(self, h: Hosted) -> str | None:
        session = await self._load(h)
        self.touch(h)
        async with h.load_lock:  # not released while the model writes the title
            title = await session.generate_title()
        if title is not None:
            h.title = title
            h.server_event("title", title=title)
        return title

    # ------------------------------------------------------------------ fork, delete

    async def fork(self, h: Hosted, at: tuple[int, int]) -> str:
        if h.busy is not None:
            raise ApiError(409, "task_in_progress", "the session is busy")
        try:
            # Before unloading: one not written yet could not be loaded again (a fuzzer's 500).
            self.root.latest_trace(h.id, project=h.project, agent=h.agent)
        except FileNotFoundError:
            raise ApiError(400, "bad_fork_point", "the session has no records yet") from None
        await self._unload(h)  # our own lock would refuse the fork (R-FORK-5)
        try:
            new_id = await anyio.to_thread.run_sync(
                lambda: fork_session(self.root, h.id, at=at, project=h.project, agent=h.agent)
            )
        except SessionLocked as exc:
            raise ApiError(409, "session_locked", str(exc)) from None
        except ValueError as exc:
            raise ApiError(400, "bad_fork_point", str(exc)) from None
        except FileNotFoundError:
            # Created but nothing written yet (found by the stateful fuzzer, issue 29).
            raise ApiError(400, "bad_fork_point", "the session has no records yet") from None
        self._on_created(new_id, "fork")
        return new_id

    async def delete(self, h: Hosted) -> None:
        if h.busy is not None:
            raise ApiError(409, "task_in_progress", "the session is busy")
        await self._unload(h)
        try:
            self.root.delete_session(h.id, project=h.project, agent=h.agent, missing_ok=True)
        except SessionLocked as exc:  # another process has it open: deleting would lose records
            raise ApiError(409, "session_locked", str(exc)) from None
        h.channel.close()
        self._hosted.pop(h.id, None)

    async def set_archived(self, h: Hosted, archived: bool) -> None:
        """Write the session's ``session_archived`` mark (a record: it survives a restart and
        an index rebuild) through the store's writer, which takes the session's lock.  A
        session this server is running is 409 ``task_in_progress`` (like delete); one another
        process holds is 409 ``session_locked``; one with nothing recorded yet (created here,
        never run) is 409 ``nothing_recorded``."""
        if h.busy is not None:
            raise ApiError(409, "task_in_progress", "the session is busy")
        try:
            # Before unloading: a session created here lives only in memory until it writes.
            self.root.latest_trace(h.id, project=h.project, agent=h.agent)
        except FileNotFoundError:
            raise ApiError(
                409, "nothing_recorded", "the session has no records to mark yet"
            ) from None
        await self._unload(h)  # our own lock would refuse the writer
        async with h.load_lock:  # and no request loads it again while the mark is written
            if h.busy is not None or h.session is not None:
                # A task started while it was being unloaded (and loaded it again).
                raise ApiError(409, "task_in_progress", "the session is busy")
            try:
                await anyio.to_thread.run_sync(
                    lambda: mark_archived(
                        self.root, h.id, archived=archived, project=h.project, agent=h.agent
                    )
                )
            except SessionLocked as exc:
                raise ApiError(409, "session_locked", str(exc)) from None
            except FileNotFoundError:
                raise ApiError(
                    409, "nothing_recorded", "the session has no records to mark yet"
                ) from None
            # The stream carries every record of the trace (R-SRV-6/8): the mark too, at its
            # position, and the next load continues after it.
            h.position = await self._publish_new(h)


def _releasable(h: Hosted, idle: float, used: float) -> bool:
    """Whether ``h`` may be unloaded: loaded, unused for ``idle`` seconds since ``used``, and
    nothing of it lives only in memory."""
    session = h.session
    return (
        session is not None
        and h.busy is None
        and not h.pending
        and not h.closing.is_set()
        # A session created here and not written yet exists only in memory: keep it.
        and session.state.records > 0
        # The carry-over of an interrupted task lives only in memory (R-INT): keep it.
        and not session.context.pending
        and anyio.current_time() - used >= idle
    )


async def _recorded(root: DataRoot, h: Hosted, host: SessionHost) -> Resolved:
    """SPEC §23: a session comes back with its recorded settings — approval, max_turns,
    compaction, retry, model endpoint, MCP servers (with config.toml's secrets) — not this
    server's defaults; ``h.overrides`` (what the client said when it created it here) still
    apply."""
    _f, _l, _c, state, _m = await anyio.to_thread.run_sync(
        lambda: load_session(root, h.id, project=h.project, agent=h.agent)
    )
    resolved = resolve(
        state.settings,
        h.overrides,
        default_approval=host.approval,
        default_retry=host._retry,
        configured_mcp=host.mcp_servers,
        default_subagents=host.subagents,
    )
    h.approval = resolved.approval  # type: ignore[assignment]
    return resolved


def _make_llm(factory: LLMFactory, model: str | None, recorded: Any) -> LLM:
    """The session's model: the one a client asked for, else the recorded one; a factory that
    takes ``endpoint=`` also gets the recorded base URL (SPEC §23: the endpoint is kept)."""
    if recorded is None:
        return factory(model)
    _provider, model_id, base_url = recorded
    wanted = model if model is not None else model_id
    try:
        takes_endpoint = "endpoint" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        takes_endpoint = False
    if base_url is not None and takes_endpoint:
        return factory(wanted, endpoint=base_url)  # type: ignore[call-arg]
    return factory(wanted)


def _subagent_host(
    host: SessionHost,
    llm: LLM,
    resolved: Resolved,
    model: str | None,
    workspace: Path,
    project: str,
    agent: str,
) -> Subagents | None:
    """A session's subagent host when it offers ``run_subagent`` (``resolved``): the children
    get the parent's kind of model (``penguin._subagents``, as the CLI's ``--subagents``); 409
    when this model or environment cannot host them."""
    if not resolved.subagents:
        return None
    if not _takes(host._env_factory, "subagents"):
        raise ApiError(
            409,
            "subagents_unavailable",
            "this server's environment factory cannot offer run_subagent",
        )
    factory = host._llm_factory
    try:
        return build_subagents(
            llm,
            lambda: _make_llm(factory, model, resolved.model),
            root=host.root,
            workspace=workspace,
            project=project,
            agent=agent,
            compaction=resolved.compaction,
            max_turns=resolved.max_turns,
            fsync=host._fsync,
        )
    except SubagentsUnavailable as exc:
        raise ApiError(409, "subagents_unavailable", str(exc)) from None


def _environment(
    factory: EnvironmentFactory, children: Subagents | None
) -> Callable[[LLM, Path], Environment]:
    if children is None:
        return factory
    runner = children.runner
    return lambda llm, workspace: factory(llm, workspace, subagents=runner)


def _takes(factory: Callable[..., Any], keyword: str) -> bool:
    try:
        return keyword in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False


def _recorded_workspace(files: list[Path]) -> Path:
    for path in reversed(files):
        for record in iter_trace(path, report=False):
            if isinstance(record.payload, SessionMetaPayload):
                return Path(record.payload.workspace)
            break
    raise ApiError(409, "trace_unreadable", "the session has no session_meta record")


def _box_options(sandbox: dict[str, Any]) -> dict[str, Any]:
    """``resume_session``'s ``sandbox``/``network`` from a hosted session's record of them."""
    return {"sandbox": sandbox.get("mode"), "network": sandbox.get("network")}
