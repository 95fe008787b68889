"""One turn of a run: request spans with reconnects, the stream, approvals and tool dispatch.

Owns: the request span (``request_begin``, the LLM stream, ``request_end``: R-RUN-8…16), the
engine's request timeout, unclosed segments (R-STREAM-4), the reconnect ladder and its backoff
(R-RETRY-*), token usage restamping (R-RUN-10), approvals (R-APPROVE-1…4) and running allowed
calls (R-TOOL-6).  Does not: write records itself (the ``Recorder`` does), decide about
compaction, steering or the end of a task (the session does).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, Final, cast

import anyio
import anyio.abc

from eventstore import (
    PARTIAL_PAYLOAD_TYPES,
    ImageUrlPayload,
    InlineDataPayload,
    InlineThinkingPayload,
    OmniMessage,
    TextPayload,
    ThinkingPayload,
    TokenUsagePayload,
    ToolCallOutputPayload,
    ToolCallPayload,
    ToolDefinition,
)
from eventstore import builders as b
from eventstore.builders import is_partial, stop_reason_of
from eventstore.partials import PartialAggregator, SegmentWriter
from projections import markers as mk

from ._agen import shielded_closing
from ._config import RETRYABLE_STATUSES, RetryPolicy, attempt_stamp, exhaustion_reason
from ._protocols import LLM, Approval, ApproveFn, Environment, LLMOutcome, LLMRequest
from ._recorder import Recorder
from ._run import Attempt, Run, WriteFailed
from ._snapshots import Snapshots

__all__ = ["TurnRunner"]

_VALID_APPROVALS: Final = frozenset({"allow", "deny", "forbidden"})
# The complete messages a model streams (the payloads with a role).
_MESSAGE_PAYLOADS: Final = (
    TextPayload,
    ToolCallPayload,
    ThinkingPayload,
    InlineThinkingPayload,
    ImageUrlPayload,
    InlineDataPayload,
    ToolCallOutputPayload,
)
_log = logging.getLogger("engine")


def _warn(text: str) -> None:
    """The SPEC's stderr lines (R-APPROVE-3, R-TOOL-6), as warnings of the ``engine`` logger."""
    _log.warning("%s", text)


class TurnRunner:
    """Runs turns and request spans for one session, through its recorder.

    Resolves the toolset once (R-RUN-9); ``on_assistant_text`` sees every complete assistant
    text a request records (title capture)."""

    def __init__(
        self,
        *,
        recorder: Recorder,
        llm: LLM,
        environment: Environment,
        retry: RetryPolicy,
        system_prompt: str,
        on_assistant_text: Callable[[str], None],
        snapshots: Snapshots | None = None,
    ) -> None:
        self._rec = recorder
        self._snapshots = snapshots
        self._snapshot_due = False
        self._llm = llm
        self._env = environment
        self._retry = retry
        self._system_prompt = system_prompt
        self._tools: list[ToolDefinition] | None = None
        self._on_text = on_assistant_text
        self._backoff_wake: anyio.Event | None = None
        self._backoff_listeners: list[Callable[[int], None]] = []

    async def resolve_tools(self) -> list[ToolDefinition]:
        """R-RUN-9: the toolset, resolved once per Session object."""
        if self._tools is None:
            self._tools = list(await self._env.list_tools())
            self._rec.set_tool_list(b.tool_list_ready(self._tools))
        return self._tools

    # ------------------------------------------------------------------ turns

    async def loop(
        self, run: Run, max_turns: int, between: Callable[[Run, bool], Awaitable[bool]]
    ) -> None:
        """Turns until one ends the run, ``between(run, called_tools)`` says the task is done,
        or ``max_turns`` (> 0) is reached (R-MAXT-1/2)."""
        turns = 0
        while True:
            if max_turns > 0 and turns >= max_turns:
                # R-MAXT-2: a failed assistant segment outside any request span.
                seg = SegmentWriter("text")
                run.push(seg.start())
                run.push(seg.delta(mk.max_turns_notice(max_turns)))
                stop, complete = seg.stop("failed")
                run.push(stop)
                self._rec.emit(complete, run.push)
                return
            turns += 1
            called = await self.turn(run)
            if called is None or not await between(run, called):
                return

    async def turn(self, run: Run) -> bool | None:
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
                reason = mk.ABORT_BY_USER
            elif status == "auth" or (status == "failed" and outcome.permanent):
                reason = mk.abort_llm_request_error(outcome.message)
            elif reconnects >= policy.max_reconnects:
                reason = exhaustion_reason(status, policy.max_reconnects, outcome.message)
            else:
                reconnects += 1
                wait = attempt.retry_in_ms
                if await self.backoff(run, policy.delay_ms(reconnects) if wait is None else wait):
                    reason = mk.ABORT_DURING_BACKOFF
                else:
                    continue
            run.ended_by_abort = True
            self._rec.emit(b.abort(reason), run.push)
            return None

    def use_snapshots(self, snapshots: Snapshots | None) -> None:
        self._snapshots = snapshots

    async def snapshot_at_run_end(self, run: Run) -> None:
        """R-SNAP-1: the workspace as a run's tools left it, so that a later rewind can tell the
        session's own changes from changes made outside it."""
        snaps = self._snapshots
        if snaps is None or not snaps.dirty or run.signal.aborted or run.ended_by_abort:
            return
        await snaps.take(lambda m: self._rec.emit(m, run.push))

    async def backoff(self, run: Run, delay_ms: int) -> bool:
        """Wait out one ladder step; returns True when the signal ended it (R-RETRY-12/13)."""
        if run.signal.aborted:
            return True
        wake = anyio.Event()
        self._backoff_wake = wake
        forget = run.signal.wake_on_abort(wake)
        try:
            for listener in tuple(self._backoff_listeners):
                listener(delay_ms)  # may fire the signal: the wait then ends at once
            with anyio.move_on_after(delay_ms / 1000):
                await wake.wait()
        finally:
            forget()
            self._backoff_wake = None
        return run.signal.aborted

    def add_backoff_listener(self, listener: Callable[[int], None]) -> Callable[[], None]:
        self._backoff_listeners.append(listener)
        return lambda: self._backoff_listeners.remove(listener)

    def skip_wait(self) -> bool:
        """End the backoff in progress as if its timer had elapsed (R-RETRY-12)."""
        wake = self._backoff_wake
        if wake is None or wake.is_set():
            return False
        wake.set()
        return True

    # ------------------------------------------------------------------ a request span

    async def request(
        self,
        run: Run,
        *,
        reconnects: int,
        budget: int,
        thinking: str | None,
        on_message: Callable[[OmniMessage], None] | None = None,
        dispatch: bool = True,
    ) -> Attempt:
        """One request span: ``request_begin``, the stream, ``request_end`` (R-RUN-8…16).

        With ``dispatch`` False (compaction requests) tool calls are neither approved nor run
        and nothing is pushed onto the run's stream; ``on_message`` sees what is yielded.
        """
        push = run.push if dispatch else (on_message or (lambda _m: None))
        shown = run.push if dispatch else (lambda _m: None)
        self._snapshot_due = dispatch and self._snapshots is not None
        self._rec.emit(b.request_begin(), shown)
        ctx = self._rec.context
        request = LLMRequest(
            system_prompt=self._system_prompt,
            tools=list(self._tools or []),
            messages=ctx.request_messages(),
            new_messages=len(ctx.snapshot),
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
            self._rec.emit(end, shown)
        return Attempt(
            outcome=outcome, called_tools=called, outputs=outputs, retry_in_ms=retry_in_ms
        )

    def _retry_in_ms(
        self, run: Run, outcome: LLMOutcome, reconnects: int, budget: int
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

    async def _next(self, stream: Any) -> OmniMessage | LLMOutcome | None:
        """The stream's next item; a model quiet for longer than the request timeout is a
        transport failure, retried like any timeout (the engine enforces it)."""
        timeout_ms = self._retry.request_timeout_ms
        if not timeout_ms:
            return cast("OmniMessage | LLMOutcome | None", await anext(stream, None))
        with anyio.move_on_after(timeout_ms / 1000) as waited:
            return cast("OmniMessage | LLMOutcome | None", await anext(stream, None))
        assert waited.cancelled_caught
        return LLMOutcome("timeout", mk.request_timeout_message(timeout_ms))

    async def _consume(
        self,
        run: Run,
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
            async with shielded_closing(self._llm.stream(request)) as stream:
                timed = bool(self._retry.request_timeout_ms)
                while True:
                    item = await (self._next(stream) if timed else anext(stream, None))
                    if item is None or isinstance(item, LLMOutcome):
                        outcome = item
                        break
                    if item.origin is not None or isinstance(item.payload, PARTIAL_PAYLOAD_TYPES):
                        if item.origin is None:
                            segments.feed(item)
                        push(item)
                        continue
                    if item.type == "model_msg":
                        segments.settle(item)
                    msg = self._record_output(item, outputs)
                    push(msg)
                    p = msg.payload
                    if (
                        dispatch
                        and isinstance(p, ToolCallPayload)
                        and stop_reason_of(msg) == "completed"
                    ):
                        called = True
                        await self._approve_and_dispatch(run, msg, tools)
        except WriteFailed:
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
            if not is_partial(msg):
                self._rec.record(msg)
                outputs.append(msg)
            push(msg)
        return outcome, called

    def _record_output(self, msg: OmniMessage, outputs: list[OmniMessage]) -> OmniMessage:
        """Record one complete message of the stream; returns what was recorded."""
        p = msg.payload
        if isinstance(p, TokenUsagePayload):
            # R-RUN-10: the session counts are ours to keep (the LLM is stateless).
            session = self._rec.state.session_tokens + p.request
            msg = b.token_usage(p.request, session, timestamp=msg.timestamp)
            self._rec.record(msg)
            return msg
        self._rec.record(msg)
        if isinstance(p, _MESSAGE_PAYLOADS) and p.role == "assistant":
            outputs.append(msg)
            if isinstance(p, TextPayload):
                self._on_text(p.text)
        return msg

    # ------------------------------------------------------------------ approvals and tools

    async def _approve_and_dispatch(
        self, run: Run, call: OmniMessage, tools: anyio.abc.TaskGroup
    ) -> None:
        """R-APPROVE-1…4: one approval per call, sequential; allowed calls run concurrently."""
        if run.signal.aborted:
            return
        decision = await _ask(run.approve, call)
        if run.signal.aborted:
            return
        p = call.payload
        assert isinstance(p, ToolCallPayload)
        self._rec.emit(b.approval_decision(decision, p.tool_call_id), run.push)
        if decision == "allow":
            if self._snapshots is not None:
                if self._snapshot_due:  # R-SNAP-1: before the turn's first tool runs
                    self._snapshot_due = False
                    await self._snapshots.take(lambda m: self._rec.emit(m, run.push))
                self._snapshots.dirty = True
            tools.start_soon(self._execute, run, call)
            return
        text = mk.DENIED_BY_USER if decision == "deny" else mk.DENIED_BY_POLICY
        self._rec.emit(b.tool_call_output(p.tool_call_id, text, stop_reason="aborted"), run.push)

    async def _execute(self, run: Run, call: OmniMessage) -> None:
        """Run one allowed call; exactly one output is recorded for it (R-TOOL-6)."""
        p = call.payload
        assert isinstance(p, ToolCallPayload)
        cid = p.tool_call_id
        answered = False
        try:
            stream = self._env.execute(call, signal=run.signal, approve=run.approve)
            async with shielded_closing(stream) as it:
                async for msg in it:
                    if msg.origin is not None:
                        if msg.type == "session_meta" and len(msg.origin) == 1:
                            self._rec.record(b.subagent(msg.origin[0]))  # R-SUB-3: written only
                        run.push(msg)
                    elif is_partial(msg):
                        run.push(msg)
                    elif isinstance(msg.payload, ToolCallOutputPayload) and not answered:
                        run.push(self._rec.record_tool_output(_as_output_of(cid, msg)))
                        answered = True
        except WriteFailed:
            raise
        except Exception as exc:
            if answered:
                _warn(mk.environment_threw_warning(str(exc)))
            else:
                error = mk.tool_error(str(exc) or type(exc).__name__)
                self._rec.emit(b.tool_call_output(cid, error, stop_reason="failed"), run.push)
                answered = True
        if not answered:
            error = mk.tool_error("the environment produced no output")
            self._rec.emit(b.tool_call_output(cid, error, stop_reason="failed"), run.push)


def _as_output_of(call_id: str, msg: OmniMessage) -> OmniMessage:
    """The environment's output, answering ``call_id`` whatever id it carried."""
    out = msg.payload
    assert isinstance(out, ToolCallOutputPayload)
    if out.tool_call_id == call_id:
        return msg
    return b.tool_call_output(
        call_id,
        out.output,
        stop_reason=stop_reason_of(msg),
        images=out.images,
        timestamp=msg.timestamp,
    )


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
