"""Compaction: replacing the model context by a summary or by nothing (SPEC §10).

Owns: the triggers (R-COMPACT-3), discard (R-COMPACT-5), the summarize request loop with its
shared retry budget, repairs and corrective note (R-COMPACT-6…24), and manual compaction
(R-COMPACT-26…28).  Does not: decide what the next context holds — the ``ModelContext`` fold
closes the context and rebuilds the summary from the records written here, for the live
session and for resume alike.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal

from eventstore import (
    CompactionReason,
    OmniMessage,
    TextPayload,
    TokenUsagePayload,
    ToolCallPayload,
)
from eventstore import builders as b
from eventstore.builders import stop_reason_of
from eventstore.partials import fragment
from projections import markers as mk

if TYPE_CHECKING:
    from ._config import CompactionSettings, RetryPolicy
    from ._recorder import Recorder
    from ._run import Attempt, Run
    from ._turns import TurnRunner

__all__ = ["CompactionRunner"]

AfterTurn = Literal["none", "stop", "continued"]
Status = Literal["completed", "failed", "aborted"]


class CompactionRunner:
    """The compaction half of a ``Session``; holds only the deferred-discard flag.

    Its collaborators: the session's ``recorder`` (records and projections), ``turns`` (request
    spans and backoff), the ``retry`` policy, the model's declared ``context_window``,
    ``steering_queued()`` and ``resolve_tools()`` (manual compaction needs the toolset)."""

    def __init__(
        self,
        settings: CompactionSettings | None,
        *,
        recorder: Recorder,
        turns: TurnRunner,
        retry: RetryPolicy,
        context_window: int | None,
        steering_queued: Callable[[], bool],
        resolve_tools: Callable[[], Awaitable[object]],
    ) -> None:
        self.settings = settings
        self._rec = recorder
        self._turns = turns
        self._retry = retry
        self._window = context_window
        self._steering_queued = steering_queued
        self._resolve_tools = resolve_tools
        self._deferred_discard = False
        self._note_due = False  # a corrective note goes before the next attempt (R-COMPACT-15)

    def compactability(self) -> Literal["ok", "unsupported", "empty", "just_compacted"]:
        """R-COMPACT-25: whether a manual compaction has anything to do."""
        state = self._rec.state
        if self.settings is None:
            return "unsupported"
        if state.turns_in_context >= 1:
            return "ok"
        return "just_compacted" if state.from_compaction else "empty"

    # ------------------------------------------------------------------ triggers

    def trigger(self) -> CompactionReason | None:
        """R-COMPACT-2/3: ``context`` first, then ``turns``."""
        settings = self.settings
        if settings is None:
            return None
        state = self._rec.state
        threshold = settings.threshold(self._window)
        if threshold > 0 and state.last_request_total >= threshold:
            return "context"
        turns = settings.max_session_turns
        if turns > 0 and state.turns_in_context >= turns:
            return "turns"
        return None

    async def after_turn(self, run: Run, *, mid_task: bool) -> AfterTurn:
        """R-RUN-18: the check after every completed turn."""
        reason = self.trigger()
        settings = self.settings
        if reason is None or settings is None:
            return "none"
        if settings.mode == "discard":
            if mid_task:
                self._deferred_discard = True  # R-COMPACT-5: deferred to the task's end
                return "none"
            self._discard(run, reason, run.push)
            return "stop"
        status = await self._summarize(run, reason, push=run.push)
        if status == "completed":
            if mid_task or self._steering_queued():
                # R-COMPACT-13: written now (this write rotates), then the task goes on.
                summary = self._rec.context.pending_summary
                assert summary is not None
                self._rec.record(summary)
                return "continued"
            return "stop"
        if status == "aborted":
            if mid_task:
                self._rec.emit(b.abort(mk.ABORT_DURING_COMPACTION), run.push)
            return "stop"  # R-COMPACT-23: a boundary abort ends without an abort event
        if mid_task:
            self._rec.emit(b.abort(mk.ABORT_COMPACTION_FAILED), run.push)
            return "stop"
        return "none"

    async def at_task_end(self, run: Run) -> None:
        """A discard deferred from mid-task runs when the task ends, if still triggered."""
        if not self._deferred_discard:
            return
        self._deferred_discard = False
        reason = self.trigger()
        if reason is not None:
            self._discard(run, reason, run.push)

    # ------------------------------------------------------------------ discard

    def _discard(
        self, run: Run, reason: CompactionReason, push: Callable[[OmniMessage], None]
    ) -> None:
        state = self._rec.state
        begin = b.compaction_begin(
            reason, "discard", context=state.last_request_total, turns=state.turns_in_context
        )
        self._rec.emit(begin, push)
        self._rec.emit(b.compaction_end(reason, "discard", "completed"), push)

    # ------------------------------------------------------------------ summarize

    async def _summarize(
        self, run: Run, reason: CompactionReason, *, push: Callable[[OmniMessage], None]
    ) -> Status:
        rec = self._rec
        settings = self.settings
        assert settings is not None
        state = rec.state
        begin = b.compaction_begin(
            reason, "summarize", context=state.last_request_total, turns=state.turns_in_context
        )
        rec.emit(begin, push)
        rec.record(b.user_text(settings.prompt))  # R-COMPACT-6: written once, never yielded
        budget = self._retry.compaction_budget
        retries = 0
        attempts = 0
        self._note_due = False

        def end(status: Status, error: str | None = None) -> Status:
            msg = b.compaction_end(
                reason,
                "summarize",
                status,
                attempt=attempts or None,
                error_message=error if status == "failed" else None,
            )
            rec.emit(msg, push)
            return status

        while True:
            if run.signal.aborted:
                return end("aborted")
            if self._note_due:
                self._note_due = False
                rec.record(b.user_text(mk.CORRECTIVE_NOTE))  # R-COMPACT-15
            visible = _Visible(push)
            attempt = await self._turns.request(
                run,
                reconnects=retries,
                budget=budget,
                thinking=None,
                on_message=visible.feed,
                dispatch=False,
            )
            visible.finish()
            attempts += 1
            verdict, detail = self._judge(run, attempt)
            if verdict != "retry":
                return end(verdict, detail)
            if retries >= budget:  # R-COMPACT-19
                return end("failed", detail)
            retries += 1
            wait = attempt.retry_in_ms
            if await self._turns.backoff(
                run, self._retry.delay_ms(retries) if wait is None else wait
            ):
                return end("aborted")

    def _judge(self, run: Run, attempt: Attempt) -> tuple[Status | Literal["retry"], str | None]:
        """What one summarize attempt means: done (completed, failed, aborted) or retry, with
        the error detail a final failure reports."""
        outcome = attempt.outcome
        status = outcome.status
        if status == "auth":
            return "failed", outcome.message  # R-COMPACT-17
        if status == "aborted" or (status != "completed" and run.signal.aborted):
            return "aborted", None  # R-COMPACT-18
        if status != "completed":
            if status == "failed" and outcome.permanent:
                return "failed", outcome.message
            return "retry", outcome.message  # R-COMPACT-16
        calls = [
            m
            for m in attempt.outputs
            if isinstance(m.payload, ToolCallPayload) and stop_reason_of(m) == "completed"
        ]
        body = "".join(
            m.payload.text for m in attempt.outputs if isinstance(m.payload, TextPayload)
        )
        if mk.extract_summary(body) and not calls:
            return "completed", None  # R-COMPACT-12: the fold builds the summary
        for call in calls:  # R-COMPACT-14: repairs, written, never streamed
            cp = call.payload
            assert isinstance(cp, ToolCallPayload)
            repair = b.tool_call_output(cp.tool_call_id, mk.COMPACTION_REPAIR, stop_reason="failed")
            self._rec.record(repair)
        if run.signal.aborted:
            return "aborted", None
        self._note_due = True
        return "retry", mk.COMPACTION_ERROR_TOOL_CALLS if calls else mk.COMPACTION_ERROR_NO_SUMMARY

    # ------------------------------------------------------------------ manual

    async def manual(self, run: Run, on_message: Callable[[OmniMessage], None] | None) -> Status:
        """R-COMPACT-26…28: between runs; the carry-over is the folded input."""
        settings = self.settings
        assert settings is not None
        push = on_message or (lambda _m: None)
        await self._resolve_tools()
        if settings.mode == "discard":
            self._discard(run, "manual", push)
            return "completed"
        return await self._summarize(run, "manual", push=push)


class _Visible:
    """R-COMPACT-8: what a compaction attempt shows on the stream."""

    def __init__(self, push: Callable[[OmniMessage], None]) -> None:
        self._push = push
        self._streamed_text = False
        self._texts: list[OmniMessage] = []
        self._usage: list[OmniMessage] = []

    def feed(self, msg: OmniMessage) -> None:
        p = msg.payload
        frag = fragment(msg)
        if frag is not None:
            if frag.kind == "text":
                self._streamed_text = self._streamed_text or bool(frag.content)
                self._push(msg)
        elif isinstance(p, TextPayload):
            if p.role == "assistant" and p.text:
                self._texts.append(msg)
        elif isinstance(p, TokenUsagePayload):
            self._usage.append(msg)

    def finish(self) -> None:
        if not self._streamed_text:
            for msg in self._texts:
                self._push(msg)
        for msg in self._usage:
            self._push(msg)
