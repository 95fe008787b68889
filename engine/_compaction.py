"""Compaction: replacing the model context by a summary or by nothing (SPEC §10).

Owns: the triggers (R-COMPACT-3), discard (R-COMPACT-5), the summarize request loop with its
shared retry budget, repairs and corrective note (R-COMPACT-6…24), and manual compaction
(R-COMPACT-26…28).  Does not: decide what the next context holds — the ``ModelContext`` fold
closes the context and rebuilds the summary from the records written here, for the live
session and for resume alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from eventstore import CompactionReason, OmniMessage, TextPayload, ToolCallPayload
from eventstore import builders as b
from eventstore.builders import stop_reason_of
from projections import markers as mk

if TYPE_CHECKING:
    from ._session import Session, _Run

__all__ = ["CompactionRunner"]

AfterTurn = Literal["none", "stop", "continued"]
Status = Literal["completed", "failed", "aborted"]


class CompactionRunner:
    """The compaction half of a ``Session``; holds only the deferred-discard flag."""

    def __init__(self, session: Session) -> None:
        self._s = session
        self._deferred_discard = False

    # ------------------------------------------------------------------ triggers

    def trigger(self) -> CompactionReason | None:
        """R-COMPACT-2/3: ``context`` first, then ``turns``."""
        settings = self._s._compaction
        if settings is None:
            return None
        state = self._s._state
        threshold = settings.threshold(getattr(self._s._llm, "context_window", None))
        if threshold > 0 and state.last_request_total >= threshold:
            return "context"
        turns = settings.max_session_turns
        if turns > 0 and state.turns_in_context >= turns:
            return "turns"
        return None

    async def after_turn(self, run: _Run, *, mid_task: bool) -> AfterTurn:
        """R-RUN-18: the check after every completed turn."""
        reason = self.trigger()
        settings = self._s._compaction
        if reason is None or settings is None:
            return "none"
        if settings.mode == "discard":
            if mid_task:
                self._deferred_discard = True  # R-COMPACT-5: deferred to the task's end
                return "none"
            self._discard(run, reason, run.push)
            return "stop"
        status = await self._summarize(run, reason, push=run.push)
        s = self._s
        if status == "completed":
            if mid_task or s._steering:
                # R-COMPACT-13: written now (this write rotates), then the task goes on.
                summary = s._ctx.pending_summary
                assert summary is not None
                s.record(summary)
                return "continued"
            return "stop"
        if status == "aborted":
            if mid_task:
                s.emit(run, b.abort(mk.ABORT_DURING_COMPACTION))
            return "stop"  # R-COMPACT-23: a boundary abort ends without an abort event
        if mid_task:
            s.emit(run, b.abort(mk.ABORT_COMPACTION_FAILED))
            return "stop"
        return "none"

    async def at_task_end(self, run: _Run) -> None:
        """A discard deferred from mid-task runs when the task ends, if still triggered."""
        if not self._deferred_discard:
            return
        self._deferred_discard = False
        reason = self.trigger()
        if reason is not None:
            self._discard(run, reason, run.push)

    # ------------------------------------------------------------------ discard

    def _discard(
        self, run: _Run, reason: CompactionReason, push: Callable[[OmniMessage], None]
    ) -> None:
        s = self._s
        state = s._state
        begin = b.compaction_begin(
            reason, "discard", context=state.last_request_total, turns=state.turns_in_context
        )
        s.record(begin)
        push(begin)
        end = b.compaction_end(reason, "discard", "completed")
        s.record(end)
        push(end)

    # ------------------------------------------------------------------ summarize

    async def _summarize(
        self, run: _Run, reason: CompactionReason, *, push: Callable[[OmniMessage], None]
    ) -> Status:
        s = self._s
        settings = s._compaction
        assert settings is not None
        state = s._state
        begin = b.compaction_begin(
            reason, "summarize", context=state.last_request_total, turns=state.turns_in_context
        )
        s.record(begin)
        push(begin)
        s.record(b.user_text(settings.prompt))  # R-COMPACT-6: written once, never yielded
        budget = s._retry.compaction_budget
        retries = 0
        attempts = 0
        last_detail: str | None = None
        pending_note = False

        def end(status: Status, *, error: str | None = None) -> Status:
            msg = b.compaction_end(
                reason,
                "summarize",
                status,
                attempt=attempts or None,
                error_message=error if status == "failed" else None,
            )
            s.record(msg)
            push(msg)
            return status

        while True:
            if run.signal.aborted:
                return end("aborted")
            if pending_note:
                s.record(b.user_text(mk.CORRECTIVE_NOTE))  # R-COMPACT-15
                pending_note = False
            visible = _Visible(push)
            attempt = await s.request(
                run,
                reconnects=retries,
                budget=budget,
                thinking=None,
                on_message=visible.feed,
                dispatch=False,
            )
            visible.finish()
            attempts += 1
            outcome = attempt.outcome
            status = outcome.status
            if status == "completed":
                calls = [
                    m
                    for m in attempt.outputs
                    if isinstance(m.payload, ToolCallPayload) and stop_reason_of(m) == "completed"
                ]
                body = "".join(
                    m.payload.text for m in attempt.outputs if isinstance(m.payload, TextPayload)
                )
                summary = mk.extract_summary(body)
                if summary and not calls:
                    return end("completed")  # R-COMPACT-12: the fold builds the summary
                last_detail = (
                    mk.COMPACTION_ERROR_TOOL_CALLS if calls else mk.COMPACTION_ERROR_NO_SUMMARY
                )
                for call in calls:  # R-COMPACT-14: repairs, written, never streamed
                    cp = call.payload
                    assert isinstance(cp, ToolCallPayload)
                    s.record(
                        b.tool_call_output(
                            cp.tool_call_id, mk.COMPACTION_REPAIR, stop_reason="failed"
                        )
                    )
                if run.signal.aborted:
                    return end("aborted")
                pending_note = True
            elif status == "auth":
                return end("failed", error=outcome.message)  # R-COMPACT-17
            elif status == "aborted" or run.signal.aborted:
                return end("aborted")  # R-COMPACT-18
            else:
                last_detail = outcome.message  # R-COMPACT-16
                if status == "failed" and outcome.permanent:
                    return end("failed", error=last_detail)
            if retries >= budget:  # R-COMPACT-19
                return end("failed", error=last_detail)
            retries += 1
            wait = (
                attempt.retry_in_ms
                if attempt.retry_in_ms is not None
                else s._retry.delay_ms(retries)
            )
            if await s.backoff(run, wait):
                return end("aborted")

    # ------------------------------------------------------------------ manual

    async def manual(self, run: _Run, on_message: Callable[[OmniMessage], None] | None) -> Status:
        """R-COMPACT-26…28: between runs; the carry-over is the folded input."""
        s = self._s
        settings = s._compaction
        assert settings is not None
        push = on_message or (lambda _m: None)
        await s.resolve_tools()
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
        tag = getattr(getattr(p, "__struct_config__", None), "tag", None)
        if tag == "partial_text":
            if getattr(p, "text", ""):
                self._streamed_text = True
            self._push(msg)
        elif tag == "text" and getattr(p, "role", None) == "assistant":
            if getattr(p, "text", ""):
                self._texts.append(msg)
        elif tag == "token_usage":
            self._usage.append(msg)

    def finish(self) -> None:
        if not self._streamed_text:
            for msg in self._texts:
                self._push(msg)
        for msg in self._usage:
            self._push(msg)
