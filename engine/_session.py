"""Session: one conversation bound to a workspace, a system prompt and a model (SPEC §5).

Owns: the session lifecycle (create, the task group, close), the record path (write, then fold
into the projections, then push onto the run's stream), ``run()`` as an abandon-safe async
generator, steering, manual compaction, titles.  Does not: decide what the model sees (the
``projections`` fold does: every request is built from ``ModelContext``), run tools (the
``Environment``), or format markers (``projections.markers``).

Concurrency shape: ``run()`` starts one driver task in the session's task group and only ever
awaits the receiving end of a memory stream, so nothing yields inside a task group or cancel
scope.  The driver writes each record and pushes it onto the stream in the same synchronous
step (R-TRACE-13), so stream order equals trace order.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, cast

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectSendStream

from eventstore import (
    DEFAULT_AGENT,
    DEFAULT_PROJECT,
    DataRoot,
    FsyncPolicy,
    ImageUrlPayload,
    OmniMessage,
    RecordTooLarge,
    SessionMetaPayload,
    TextPayload,
    TokenCounts,
    TokenUsagePayload,
    ToolCallOutputPayload,
    ToolCallPayload,
    ToolDefinition,
    TraceError,
    TraceWriteError,
    TraceWriter,
    encode_line,
)
from eventstore import builders as b
from eventstore.builders import is_partial, stop_reason_of
from eventstore.partials import PartialAggregator, SegmentWriter
from projections import ModelContext, SessionState
from projections import markers as mk

from ._agen import as_agen
from ._compaction import CompactionRunner
from ._config import (
    DEFAULT_MAX_TURNS,
    RETRYABLE_STATUSES,
    CompactionSettings,
    RetryPolicy,
    attempt_stamp,
    check_workspace,
    exhaustion_reason,
)
from ._exceptions import SessionBroken, SessionBusy
from ._goal import GoalOptions, GoalRun
from ._images import fold_images
from ._protocols import LLM, Approval, ApproveFn, Environment, LLMOutcome, LLMRequest
from ._signal import AbortSignal
from ._summaries import store_file_summary

__all__ = ["Compactability", "RecordListener", "Session"]

Compactability = Literal["ok", "unsupported", "empty", "just_compacted"]
RecordListener = Callable[[OmniMessage, Path], None]
"""Called with each record right after it is written and folded, and the file it went to."""

_VALID_APPROVALS = frozenset({"allow", "deny", "forbidden"})


class _WriteFailed(Exception):
    """A record could not be written: the run ends by the fail-stop path (R-TRACE-15)."""

    def __init__(self, cause: TraceError, *, fatal: bool) -> None:
        self.cause = cause
        self.fatal = fatal
        super().__init__(str(cause))


@dataclass
class _Run:
    """Per-run state: the stream, the signal and the approval policy."""

    send: MemoryObjectSendStream[OmniMessage]
    signal: AbortSignal
    approve: ApproveFn | None
    thinking_level: str | None
    done: anyio.Event = field(default_factory=anyio.Event)
    consumer_gone: bool = False
    # An error that ended the run outside the loop's own paths (e.g. a steering image fold that
    # failed, R-STEER-6): raised out of ``run()`` once the stream has drained.
    error: BaseException | None = None
    tap: Callable[[OmniMessage], None] | None = None  # sees every message (goal mode)

    def push(self, msg: OmniMessage) -> None:
        if self.tap is not None:
            self.tap(msg)
        if not self.consumer_gone:
            try:
                self.send.send_nowait(msg)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self.consumer_gone = True


@dataclass
class _Attempt:
    outcome: LLMOutcome
    called_tools: bool  # the ledger holds at least one completed call
    outputs: list[OmniMessage]  # the complete assistant messages recorded, in order
    retry_in_ms: int | None = None  # the wait stamped on request_end (None: no in-run retry)


_log = logging.getLogger("engine")


def _warn(text: str) -> None:
    """The SPEC's stderr lines (R-APPROVE-3, R-TOOL-6), as warnings of the ``engine`` logger."""
    _log.warning("%s", text)


class Session:
    """A conversation.  Use ``async with await Session.create(...) as session``."""

    DEFAULT_COMPACTION: CompactionSettings = CompactionSettings()
    DEFAULT_RETRY: RetryPolicy = RetryPolicy()

    def __init__(
        self,
        *,
        llm: LLM,
        environment: Environment,
        root: DataRoot,
        session_id: str,
        project: str,
        agent: str,
        date_dir: str,
        workspace: Path,
        meta: OmniMessage,
        compaction: CompactionSettings | None,
        max_turns: int,
        retry: RetryPolicy,
        fsync: FsyncPolicy,
        trace_path: Path,
        writer: TraceWriter | None = None,
        context: ModelContext | None = None,
        state: SessionState | None = None,
    ) -> None:
        self._llm = llm
        self._env = environment
        self._root = root
        self._id = session_id
        self._project = project
        self._agent = agent
        self._date_dir = date_dir
        self._workspace = workspace
        self._meta = meta
        self._compaction = compaction
        self._max_turns = max_turns
        self._retry = retry
        self._fsync: FsyncPolicy = fsync
        self._trace_path = trace_path
        self._writer = writer
        self._ctx = context if context is not None else ModelContext()
        self._state = state if state is not None else SessionState()
        self._meta_written = writer is not None
        self._tools: list[ToolDefinition] | None = None
        self._tool_list_record: OmniMessage | None = None
        self._tool_list_in_file = False
        self._tg: anyio.abc.TaskGroup | None = None
        self._entered = False
        self._closed = False
        self._active: _Run | None = None
        self._compacting: _Run | None = None
        self._busy = False
        self._broken: str | None = None
        self._write_failed = False
        # The current file holds nothing but its rotation head (R-ROOT-10 residue if we stop),
        # and that head, not folded yet.
        self._head_only = False
        self._head_records: list[OmniMessage] = []
        self._steering: list[list[OmniMessage]] = []
        self._backoff_wake: anyio.Event | None = None
        self._title_user: list[str] = []
        self._title_assistant: list[str] = []
        self._title_frozen = False
        self._title_capturing = False
        self.title_usage: TokenCounts | None = None
        self._compactor = CompactionRunner(self)
        self._record_listeners: list[RecordListener] = []

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
    ) -> Session:
        """A new session (R-SESSION-1): validates the workspace, allocates an id, writes nothing."""
        data_root = root if isinstance(root, DataRoot) else DataRoot(root)
        ws = await anyio.to_thread.run_sync(check_workspace, workspace)
        now = _dt.datetime.now()
        session_id = data_root.new_session_id(now)
        date_dir = now.date().isoformat()  # R-ROOT-3: the same local date as the id
        trace_path = data_root.trace_path(
            session_id, 1, project=project, agent=agent, date=date_dir
        )
        window = getattr(llm, "context_window", None)
        meta = b.session_meta(
            session_id=session_id,
            provider=str(getattr(llm, "provider", None) or "custom"),
            model_id=str(getattr(llm, "model_id", None) or type(llm).__name__),
            model_context_window=window if isinstance(window, int) else "unknown",
            system_prompt=system_prompt,
            agent_state=str(data_root.agent_state(project, agent)),
            workspace=str(ws),
            source=source,
        )
        return cls(
            llm=llm,
            environment=environment,
            root=data_root,
            session_id=session_id,
            project=project,
            agent=agent,
            date_dir=date_dir,
            workspace=Path(ws),
            meta=meta,
            compaction=compaction,
            max_turns=max_turns,
            retry=retry,
            fsync=fsync,
            trace_path=trace_path,
        )

    # ------------------------------------------------------------------ context manager

    async def __aenter__(self) -> Self:
        if self._entered:
            raise RuntimeError("a Session can be entered once")
        self._entered = True
        self._tg_cm = anyio.create_task_group()
        self._tg = await self._tg_cm.__aenter__()
        bind = getattr(self._env, "bind_scratchpad", None)
        if callable(bind):
            bind(self.scratchpad)
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
                result = await self._tg_cm.__aexit__(exc_type, exc, tb)
            finally:
                self._tg = None
                self._close_writer()
                with anyio.CancelScope(shield=True):
                    await self._env.aclose()
        return result

    def _close_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()
            except TraceError:
                pass
        self._closed = True

    # ------------------------------------------------------------------ properties

    @property
    def id(self) -> str:
        return self._id

    @property
    def trace_path(self) -> Path:
        return self._writer.path if self._writer is not None else self._trace_path

    @property
    def context(self) -> ModelContext:
        return self._ctx

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def workspace(self) -> Path:
        return self._workspace

    @property
    def meta(self) -> OmniMessage:
        """The session's ``session_meta`` record (written first in every trace file)."""
        return self._meta

    @property
    def system_prompt(self) -> str:
        meta = self._meta.payload
        assert isinstance(meta, SessionMetaPayload)
        return meta.system_prompt

    @property
    def scratchpad(self) -> Path:
        return self._root.scratchpad(self._id, project=self._project, agent=self._agent)

    def _scratchpad_dir(self) -> Path:
        """The scratchpad, created on demand with 0700 directories (R-IMG-1, R-ROOT-9)."""
        return self._root.ensure_dir(self.scratchpad)

    @property
    def running(self) -> bool:
        return self._active is not None

    @property
    def broken(self) -> bool:
        return self._broken is not None

    # ------------------------------------------------------------------ recording

    def _open_writer(self) -> TraceWriter:
        writer = TraceWriter(self._trace_path, fsync=self._fsync, session_id=self._id)
        self._writer = writer
        return writer

    def record(self, msg: OmniMessage) -> None:
        """Write one record, then fold it (R-PROJ-3).  Raises ``_WriteFailed``."""
        if self._write_failed:
            raise _WriteFailed(
                TraceWriteError("an earlier append failed", path=self.trace_path), fatal=True
            )
        try:
            writer = self._writer
            if writer is None:
                writer = self._open_writer()
            if not self._meta_written:
                writer.append(self._meta)
                self._meta_written = True
                self._fold(self._meta)
                self._notify(self._meta)
            elif self._state.rotation_pending and not self._head_only:
                # (A head already written stays: a record refused after it goes on in that file.)
                try:
                    self._rotate(writer)
                except RecordTooLarge as exc:
                    # The session's own head cannot be written, so no new file can start.
                    self._write_failed = True
                    raise _WriteFailed(exc, fatal=True) from None
            writer.append(msg)
            self._head_only = False
            # A head is folded with the first record after it: alone it is residue that resume
            # ignores (R-ROOT-10), and the live projections must read as resume's would.
            head, self._head_records = self._head_records, []
            for record in head:
                self._fold(record)
                self._notify(record)
        except RecordTooLarge as exc:
            raise _WriteFailed(exc, fatal=False) from None
        except TraceError as exc:
            self._write_failed = True
            raise _WriteFailed(exc, fatal=True) from None
        self._fold(msg)
        self._notify(msg)

    def add_record_listener(self, listener: RecordListener) -> Callable[[], None]:
        """Call ``listener(record, file)`` after every record this session writes, in trace
        order and in the writing task (a host such as the server tags streamed messages with
        trace positions this way).  Returns a function that removes the listener.  A listener
        must not raise or block."""
        self._record_listeners.append(listener)
        return lambda: self._record_listeners.remove(listener)

    def _notify(self, msg: OmniMessage) -> None:
        if self._record_listeners:
            path = self.trace_path
            for listener in tuple(self._record_listeners):
                listener(msg, path)

    def _fold(self, msg: OmniMessage) -> None:
        self._ctx.apply(msg)
        self._state.apply(msg)

    def _rotate(self, writer: TraceWriter) -> None:
        """R-TRACE-8/9: the next file starts with the session's own head records."""
        closed = writer.path
        self._trace_path = writer.rotate()
        store_file_summary(closed)  # R-TRACE-19
        self._head_only = True
        writer.append(self._meta)
        self._head_records.append(self._meta)
        self._tool_list_in_file = False
        if self._tool_list_record is not None:
            writer.append(self._tool_list_record)
            self._head_records.append(self._tool_list_record)
            self._tool_list_in_file = True

    def _record_tool_output(self, msg: OmniMessage) -> OmniMessage:
        """R-TRACE-17: an oversized tool output is shortened until it fits, then written."""
        try:
            self.record(msg)
            return msg
        except _WriteFailed as exc:
            if not isinstance(exc.cause, RecordTooLarge):
                raise
            shortened = self._shrink_output(msg, exc.cause.limit)
            self.record(shortened)
            return shortened

    @staticmethod
    def _shrink_output(msg: OmniMessage, limit: int) -> OmniMessage:
        p = msg.payload
        assert isinstance(p, ToolCallOutputPayload)
        status = p.stop_reason or "completed"

        def build(text: str, images: list[str] | None) -> OmniMessage:
            return b.tool_call_output(
                p.tool_call_id, text, stop_reason=status, images=images, timestamp=msg.timestamp
            )

        images = p.images
        if images and len(encode_line(build(p.output, images))) > limit:
            images = None
        candidate = build(p.output, images)
        if len(encode_line(candidate)) <= limit:
            return candidate
        lo, hi = 0, len(p.output)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            text = p.output[:mid] + "\n" + mk.output_truncated_note(mid)
            if len(encode_line(build(text, images))) <= limit:
                lo = mid
            else:
                hi = mid - 1
        return build(p.output[:lo] + "\n" + mk.output_truncated_note(lo), images)

    def emit(self, run: _Run, msg: OmniMessage) -> None:
        """Write a recordable message and push it onto the run's stream (R-TRACE-13)."""
        self.record(msg)
        run.push(msg)

    # ------------------------------------------------------------------ tools

    async def resolve_tools(self) -> list[ToolDefinition]:
        """R-RUN-9: the toolset, resolved once per Session object."""
        if self._tools is None:
            self._tools = list(await self._env.list_tools())
            self._tool_list_record = b.tool_list_ready(self._tools)
        return self._tools

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
    ) -> AsyncGenerator[OmniMessage, None]:
        """Drive one task and yield its messages (R-RUN-1).  Safe to abandon (R-CARRY-2).

        With ``goal`` the run drives a goal's rounds, each an ordinary task (SPEC §18)."""
        self._check_idle()
        goal_run = GoalRun.prepare(self, messages, goal) if goal is not None else None
        self._busy = True
        internal = AbortSignal()
        forget = signal.add_callback(internal.abort) if signal is not None else (lambda: None)
        send, recv = anyio.create_memory_object_stream[OmniMessage](math.inf)
        run = _Run(send=send, signal=internal, approve=approve, thinking_level=thinking_level)
        self._active = run
        assert self._tg is not None
        self._tg.start_soon(self._drive, run, list(messages or ()), goal_run)
        finished = False
        try:
            async with recv:
                async for msg in recv:
                    yield msg
            finished = True
            if run.error is not None:
                raise run.error
        finally:
            if not finished:
                run.consumer_gone = True
                internal.abort()
            with anyio.CancelScope(shield=True):
                await run.done.wait()
            forget()

    async def _drive(self, run: _Run, prompt: list[OmniMessage], goal: GoalRun | None) -> None:
        try:
            await (self._task(run, prompt) if goal is None else goal.drive(run))
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            failure = _first_write_failure(exc)
            if failure is None:
                run.error = exc
            else:
                self._end_by_write_failure(run, failure)
        finally:
            self._steering.clear()  # R-CARRY-11
            self._title_capturing = False
            if not self._title_frozen and self._title_user:
                self._title_frozen = True
            self._active = None
            self._busy = False
            run.send.close()
            run.done.set()
            if self._write_failed and self._broken is not None:
                self._close_writer()

    def _end_by_write_failure(self, run: _Run, failure: _WriteFailed) -> None:
        """R-TRACE-15/15a: one last ``abort``, attempted once, then the session is broken."""
        cause = failure.cause
        if isinstance(cause, RecordTooLarge):
            reason = mk.abort_record_too_large(cause.size)
        else:
            reason = mk.abort_trace_write_failed(str(cause))
            self._broken = str(cause)
        run.signal.abort()
        msg = b.abort(reason)
        if not self._meta_written:
            # R-TRACE-5: no file may hold an abort without its session_meta.
            pass
        elif self._head_only:
            # A failure right after a rotation: the new file is still crash residue that resume
            # skips (R-ROOT-10), which keeps the compacted context and its summary.  An abort
            # written there would make it a context of its own and lose the summary.
            pass
        elif not failure.fatal:
            try:
                self.record(msg)
                # R-TRACE-15a: the writer still works, so the spans the failure left open are
                # closed now, as resume would close them, and the next run starts outside them.
                for closure in self._ctx.closure_records():
                    self.record(closure)
            except _WriteFailed as second:
                if second.fatal:
                    self._broken = str(second.cause)
        elif self._writer is not None and not self._writer.poisoned:
            try:
                self._writer.append(msg)
            except TraceError:
                pass
            else:
                self._notify(msg)
        run.push(msg)

    async def _task(self, run: _Run, prompt: list[OmniMessage]) -> None:
        if not self._llm.vision and any(isinstance(m.payload, ImageUrlPayload) for m in prompt):
            prompt = fold_images(prompt, self._scratchpad_dir())  # R-RUN-4, R-IMG-4
        await self.resolve_tools()
        # R-RUN-5/6: pending summary, then the prompt, then (first run) tool_list_ready.
        summary = self._ctx.pending_summary
        if summary is not None:
            self.record(summary)
        for msg in prompt:
            self.record(msg)
        self._capture_title_prompt(prompt)
        if not self._tool_list_in_file and self._tool_list_record is not None:
            self.emit(run, self._tool_list_record)
            self._tool_list_in_file = True
        if run.signal.aborted:  # R-RUN-7
            self.emit(run, b.abort(mk.ABORT_BY_USER))
            return
        turns = 0
        while True:
            if self._max_turns > 0 and turns >= self._max_turns:
                self._max_turns_notice(run)
                return
            turns += 1
            called = await self._turn(run)
            if called is None:
                return
            # R-RUN-18: compaction check after every completed turn.
            steering_queued = bool(self._steering)
            mid_task = called or steering_queued
            outcome = await self._compactor.after_turn(run, mid_task=mid_task)
            if outcome == "stop":
                return
            delivered = self._deliver_steering(run)
            if outcome == "continued":
                continue
            if not called and not delivered:
                await self._compactor.at_task_end(run)
                return

    def _max_turns_notice(self, run: _Run) -> None:
        """R-MAXT-2: a failed assistant segment outside any request span."""
        notice = mk.max_turns_notice(self._max_turns)
        seg = SegmentWriter("text")
        run.push(seg.start())
        run.push(seg.delta(notice))
        stop, complete = seg.stop("failed")
        run.push(stop)
        self.emit(run, complete)

    # ------------------------------------------------------------------ one turn

    async def _turn(self, run: _Run) -> bool | None:
        """One turn with its reconnects.  Returns whether it called tools, or ``None`` when
        the run ended (an ``abort`` has been emitted)."""
        reconnects = 0
        policy = self._retry
        while True:
            attempt = await self.request(
                run,
                reconnects=reconnects,
                budget=policy.max_reconnects,
                thinking=run.thinking_level,
            )
            outcome = attempt.outcome
            status = outcome.status
            if status == "completed" and not run.signal.aborted:
                return attempt.called_tools
            if run.signal.aborted or status == "aborted":
                self.emit(run, b.abort(mk.ABORT_BY_USER))
                return None
            if status == "auth" or (status == "failed" and outcome.permanent):
                self.emit(run, b.abort(mk.abort_llm_request_error(outcome.message)))
                return None
            if reconnects >= policy.max_reconnects:
                self.emit(
                    run, b.abort(exhaustion_reason(status, policy.max_reconnects, outcome.message))
                )
                return None
            reconnects += 1
            wait = (
                attempt.retry_in_ms
                if attempt.retry_in_ms is not None
                else policy.delay_ms(reconnects)
            )
            if await self.backoff(run, wait):
                self.emit(run, b.abort(mk.ABORT_DURING_BACKOFF))
                return None

    async def backoff(self, run: _Run, delay_ms: int) -> bool:
        """Wait out one ladder step; returns True when the signal ended it (R-RETRY-12/13)."""
        if run.signal.aborted:
            return True
        wake = anyio.Event()
        self._backoff_wake = wake
        forget = run.signal.wake_on_abort(wake)
        try:
            with anyio.move_on_after(delay_ms / 1000):
                await wake.wait()
        finally:
            forget()
            self._backoff_wake = None
        return run.signal.aborted

    def skip_reconnect_wait(self) -> bool:
        """End the backoff in progress as if its timer had elapsed (R-RETRY-12)."""
        wake = self._backoff_wake
        if wake is None or wake.is_set():
            return False
        wake.set()
        return True

    async def request(
        self,
        run: _Run,
        *,
        reconnects: int,
        budget: int,
        thinking: str | None,
        on_message: Callable[[OmniMessage], None] | None = None,
        dispatch: bool = True,
    ) -> _Attempt:
        """One request span: ``request_begin``, the stream, ``request_end`` (R-RUN-8…16).

        With ``dispatch`` False (compaction requests) tool calls are neither approved nor run
        and nothing is pushed onto the run's stream; ``on_message`` sees what is yielded.
        """
        push = run.push if dispatch else (on_message or (lambda _m: None))
        begin = b.request_begin()
        self.record(begin)
        if dispatch:
            run.push(begin)
        request = LLMRequest(
            system_prompt=self.system_prompt,
            tools=list(self._tools or []),
            messages=self._ctx.request_messages(),
            new_messages=len(self._ctx.snapshot),
            thinking_level=thinking,
            signal=run.signal,
        )
        outputs: list[OmniMessage] = []
        async with anyio.create_task_group() as tools:
            outcome, called = await self._consume(run, request, tools, push, dispatch, outputs)
            retry_in_ms = self._retry_in_ms(run, outcome, reconnects, budget)
            end = b.request_end(
                outcome.status,
                error_message=outcome.message if outcome.status != "completed" else None,
                attempt=attempt_stamp(outcome.status, reconnects),
                retry_in_ms=retry_in_ms,
            )
            self.record(end)
            if dispatch:
                run.push(end)
        return _Attempt(
            outcome=outcome, called_tools=called, outputs=outputs, retry_in_ms=retry_in_ms
        )

    def _retry_in_ms(
        self, run: _Run, outcome: LLMOutcome, reconnects: int, budget: int
    ) -> int | None:
        """R-RETRY-8: present only when this failure will be retried in-run."""
        if outcome.status not in RETRYABLE_STATUSES or outcome.permanent or run.signal.aborted:
            return None
        if reconnects >= budget:
            return None
        delay = self._retry.delay_ms(reconnects + 1)
        if outcome.retry_after_s is not None and outcome.retry_after_s > 0:
            # The provider asked for a longer wait (Retry-After): honour it up to the cap.
            asked = math.ceil(outcome.retry_after_s * 1000)
            delay = max(delay, min(asked, self._retry.cap_ms))
        return delay

    async def _consume(
        self,
        run: _Run,
        request: LLMRequest,
        tools: anyio.abc.TaskGroup,
        push: Callable[[OmniMessage], None],
        dispatch: bool,
        outputs: list[OmniMessage],
    ) -> tuple[LLMOutcome, bool]:
        outcome: LLMOutcome | None = None
        called = False
        segments = PartialAggregator()
        try:
            idle_s = (
                self._retry.request_timeout_ms / 1000 if self._retry.request_timeout_ms else None
            )
            async with aclosing(as_agen(self._llm.stream(request))) as stream:
                while True:
                    if idle_s is None:
                        item = await anext(stream, None)
                    else:
                        with anyio.move_on_after(idle_s) as waited:
                            item = await anext(stream, None)
                        if waited.cancelled_caught:
                            # The engine enforces the request timeout: a model that goes quiet
                            # for longer is a transport failure, retried like any timeout.
                            outcome = LLMOutcome(
                                "timeout",
                                mk.request_timeout_message(self._retry.request_timeout_ms or 0),
                            )
                            break
                    if item is None:
                        break
                    if isinstance(item, LLMOutcome):
                        outcome = item
                        break
                    msg = item
                    if msg.origin is not None or is_partial(msg):
                        if msg.origin is None:
                            segments.feed(msg)
                        push(msg)
                        continue
                    if isinstance(msg.payload, TokenUsagePayload):
                        msg = self._restamp_usage(msg)
                        self.record(msg)
                        push(msg)
                        continue
                    if msg.type == "model_msg":
                        segments.settle(msg)
                    self.record(msg)
                    if getattr(msg.payload, "role", None) == "assistant":
                        outputs.append(msg)
                    text = msg.payload
                    if isinstance(text, TextPayload) and self._title_capturing:
                        self._capture_title_text(text)
                    push(msg)
                    p = msg.payload
                    if (
                        dispatch
                        and isinstance(p, ToolCallPayload)
                        and stop_reason_of(msg) == "completed"
                    ):
                        called = True
                        await self._approve_and_dispatch(run, msg, tools)
        except _WriteFailed:
            raise
        except Exception as exc:
            outcome = LLMOutcome("failed", str(exc) or type(exc).__name__)
        if outcome is None:
            outcome = LLMOutcome("failed", mk.LLM_STREAM_NO_OUTCOME)
        if outcome.status == "completed" and segments.open_count:
            # A "completed" stream that left a segment open was cut short: a truncated
            # response, retried like any malformed one (its tool calls are never dispatched).
            outcome = LLMOutcome("malformed", mk.UNCLOSED_SEGMENT)
        for msg in segments.close_open(outcome.status):
            if is_partial(msg):
                push(msg)
            else:
                self.record(msg)
                outputs.append(msg)
                push(msg)
        return outcome, called

    def _capture_title_text(self, text: TextPayload) -> None:
        if text.role == "assistant":
            self._title_assistant.append(text.text)

    def _restamp_usage(self, msg: OmniMessage) -> OmniMessage:
        """R-RUN-10: the session counts are ours to keep (the LLM is stateless)."""
        p = msg.payload
        assert isinstance(p, TokenUsagePayload)
        session = self._state.session_tokens + p.request
        return b.token_usage(p.request, session, timestamp=msg.timestamp)

    async def _approve_and_dispatch(
        self, run: _Run, call: OmniMessage, tools: anyio.abc.TaskGroup
    ) -> None:
        """R-APPROVE-1…4: one approval per call, sequential; allowed calls run concurrently."""
        if run.signal.aborted:
            return
        decision = await self._ask(run.approve, call)
        if run.signal.aborted:
            return
        p = call.payload
        assert isinstance(p, ToolCallPayload)
        self.emit(run, b.approval_decision(decision, p.tool_call_id))
        if decision == "deny":
            self.emit(
                run, b.tool_call_output(p.tool_call_id, mk.DENIED_BY_USER, stop_reason="aborted")
            )
        elif decision == "forbidden":
            self.emit(
                run, b.tool_call_output(p.tool_call_id, mk.DENIED_BY_POLICY, stop_reason="aborted")
            )
        else:
            tools.start_soon(self._execute, run, call)

    @staticmethod
    async def _ask(approve: ApproveFn | None, call: OmniMessage) -> Approval:
        if approve is None:
            return "deny"
        try:
            result: Any = approve(call)
            if isinstance(result, Awaitable):
                result = await result
        except Exception as exc:
            _warn(mk.approve_threw_warning(str(exc)))
            return "deny"
        if result not in _VALID_APPROVALS:
            _warn(mk.approve_threw_warning(mk.invalid_approval_message(result)))
            return "deny"
        return cast(Approval, result)

    async def _execute(self, run: _Run, call: OmniMessage) -> None:
        """Run one allowed call; exactly one output is recorded for it (R-TOOL-6)."""
        p = call.payload
        assert isinstance(p, ToolCallPayload)
        cid = p.tool_call_id
        answered = False
        try:
            stream = as_agen(self._env.execute(call, signal=run.signal, approve=run.approve))
            async with aclosing(stream) as it:
                async for msg in it:
                    if msg.origin is not None:
                        if msg.type == "session_meta" and len(msg.origin) == 1:
                            self.record(b.subagent(msg.origin[0]))  # R-SUB-3: written only
                        run.push(msg)
                        continue
                    if is_partial(msg):
                        run.push(msg)
                        continue
                    out = msg.payload
                    if isinstance(out, ToolCallOutputPayload) and not answered:
                        if out.tool_call_id != cid:
                            msg = b.tool_call_output(
                                cid,
                                out.output,
                                stop_reason=stop_reason_of(msg),
                                images=out.images,
                                timestamp=msg.timestamp,
                            )
                        run.push(self._record_tool_output(msg))
                        answered = True
        except _WriteFailed:
            raise
        except Exception as exc:
            if answered:
                _warn(mk.environment_threw_warning(str(exc)))
            else:
                self.emit(
                    run,
                    b.tool_call_output(
                        cid, mk.tool_error(str(exc) or type(exc).__name__), stop_reason="failed"
                    ),
                )
                answered = True
        if not answered:
            self.emit(
                run,
                b.tool_call_output(
                    cid, mk.tool_error("the environment produced no output"), stop_reason="failed"
                ),
            )

    # ------------------------------------------------------------------ steering

    def steer(self, messages: Sequence[OmniMessage]) -> bool:
        """Queue steering for the running task (R-STEER-1…3).  ``False`` when no run is active."""
        if self._active is None or self._broken is not None:
            return False
        entry = list(messages)
        has_steering = any(
            isinstance(m.payload, ImageUrlPayload)
            or (isinstance(m.payload, TextPayload) and m.payload.text.strip())
            for m in entry
        )
        if has_steering:
            self._steering.append(entry)
        return True

    def _deliver_steering(self, run: _Run) -> bool:
        """R-STEER-4…7: drain the queue into recorded, yielded user input."""
        delivered = False
        while self._steering:
            entry = self._steering.pop(0)
            if not self._llm.vision:
                entry = fold_images(entry, self._scratchpad_dir())  # R-STEER-6
            bodies = [
                m.payload.text
                for m in entry
                if isinstance(m.payload, TextPayload) and m.payload.role == "user"
            ]
            others = [
                m
                for m in entry
                if not (isinstance(m.payload, TextPayload) and m.payload.role == "user")
            ]
            self.emit(run, b.user_text(mk.steering_block(bodies)))
            for msg in others:
                self.emit(run, msg)
            delivered = True
        return delivered

    # ------------------------------------------------------------------ compaction

    def compactability(self) -> Compactability:
        """R-COMPACT-25."""
        if self._compaction is None:
            return "unsupported"
        if self._state.turns_in_context >= 1:
            return "ok"
        return "just_compacted" if self._state.from_compaction else "empty"

    async def compact(
        self,
        *,
        signal: AbortSignal | None = None,
        on_message: Callable[[OmniMessage], None] | None = None,
    ) -> str | None:
        """Manual compaction between runs (R-COMPACT-26).  Returns the ``compaction_end``
        status, or ``None`` when the context is not compactable (nothing is written)."""
        self._check_idle()
        if self.compactability() != "ok":
            return None
        self._busy = True
        internal = AbortSignal()
        forget = signal.add_callback(internal.abort) if signal is not None else (lambda: None)
        send, recv = anyio.create_memory_object_stream[OmniMessage](0)
        recv.close()
        run = _Run(
            send=send, signal=internal, approve=None, thinking_level=None, consumer_gone=True
        )
        status: list[str] = []
        assert self._tg is not None
        # The compaction runs in the session's task group, as a run's driver does, so that a
        # cancelled caller ends it exactly like an abort (R-COMPACT-26, R-COMPACT-18).
        self._compacting = run
        self._tg.start_soon(self._drive_compaction, run, on_message, status)
        try:
            await run.done.wait()
        except BaseException:
            internal.abort()
            with anyio.CancelScope(shield=True):
                await run.done.wait()
            raise
        finally:
            forget()
        if run.error is not None:
            raise run.error
        return status[0] if status else "aborted"

    async def _drive_compaction(
        self,
        run: _Run,
        on_message: Callable[[OmniMessage], None] | None,
        status: list[str],
    ) -> None:
        try:
            status.append(await self._compactor.manual(run, on_message))
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            failure = _first_write_failure(exc)
            if failure is None:
                run.error = exc
            else:
                # R-TRACE-15/15a/17 as in run(); the caller gets the store's error.
                self._end_by_write_failure(run, failure)
                run.error = failure.cause
        finally:
            self._busy = False
            self._compacting = None
            run.send.close()
            run.done.set()
            if self._broken is not None:
                self._close_writer()

    # ------------------------------------------------------------------ titles

    def _capture_title_prompt(self, prompt: list[OmniMessage]) -> None:
        if self._title_frozen:
            return
        texts = [
            m.payload.text
            for m in prompt
            if isinstance(m.payload, TextPayload) and m.payload.role == "user"
        ]
        if texts:
            self._title_user = texts
            self._title_assistant = []
            self._title_capturing = True

    async def generate_title(self) -> str | None:
        """One out-of-band request for a short title (R-TITLE-1…4); never recorded."""
        from ._title import generate_title

        return await generate_title(self, self._llm, self._title_user, self._title_assistant)


def _first_write_failure(exc: BaseException) -> _WriteFailed | None:
    if isinstance(exc, _WriteFailed):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first_write_failure(inner)
            if found is not None:
                return found
    return None
