"""Exact resume at the crash and fault points of issue 13, one named regression test per case,
and the damaged-trace rules R-RESUME-15 and R-RESUME-15b.

Each test builds the state the differential tester found (a live session where one exists, a
written trace where only a crash or a damaged line leads there) and asserts the request the
rule gives, live and resumed alike (R-RESUME-18, INV-25).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from enginekit import Env, WriteFault, check_trace, collect, make_env, make_session

from engine import AbortSignal, CompactionSettings, LLMRequest, RetryPolicy, Session, allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import (
    DataRoot,
    OmniMessage,
    TextPayload,
    TokenCounts,
    ToolCallOutputPayload,
    TraceWriter,
)
from eventstore import builders as b
from projections import ModelContext, SessionState
from projections import markers as mk
from replay import resume_session, validate_session

pytestmark = pytest.mark.anyio

TOOLS = [{"name": "t", "description": "test tool"}]
GOAL = "[goal]\nround: 3\nship it\n[/goal]\nplease"
GOAL_DOWN = "[goal round 3 of an ended goal run — protocol omitted; do not act on it]\nplease"
PROMPT = "SUMMARIZE"


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return make_env(tmp_path)


# --------------------------------------------------------------------------- helpers


def craft(env: Env, records: list[OmniMessage]) -> str:
    """A session whose only file holds ``session_meta`` then ``records`` (a crashed or damaged
    trace no live session can leave behind the test)."""
    root = env.root
    now = dt.datetime.now()
    sid = root.new_session_id(now)
    path = root.trace_path(sid, 1, date=now.date().isoformat())
    root.ensure_dir(path.parent)
    meta = b.session_meta(
        session_id=sid,
        provider="scripted",
        model_id="script",
        model_context_window="unknown",
        system_prompt="sys",
        agent_state=str(root.agent_state("default_project", "default_agent")),
        workspace=str(env.workspace),
    )
    with TraceWriter(path, fsync="never", session_id=sid) as writer:
        for record in [meta, *records]:
            writer.append(record)
    return sid


async def resume(env: Env, sid: str, responses: list[Any], **kw: Any) -> tuple[Session, Any]:
    llm = ScriptedLLM({"responses": responses, "tools": TOOLS})
    kw.setdefault("compaction", None)
    kw.setdefault("retry", RetryPolicy(max_reconnects=2, base_ms=1, cap_ms=1))
    session = await resume_session(
        env.root, sid, llm=llm, environment=ScriptedEnvironment.from_llm(llm), **kw
    )
    llm.bind(session)
    return session, llm


async def first_request_after_resume(
    env: Env,
    sid: str,
    prompt: str | OmniMessage = "next",
    responses: list[Any] | None = None,
    *,
    damaged: bool = False,
) -> list[LLMRequest]:
    session, llm = await resume(env, sid, responses or [[{"text": "fine"}]])
    message = b.user_text(prompt) if isinstance(prompt, str) else prompt
    async with session:
        await collect(session.run([message], approve=allow_all))
        if damaged:  # the validator reports the lost line; the folds must still agree
            records = session_records(env, sid)
            assert ModelContext.from_records(records) == session.context
            assert SessionState.from_records(records) == session.state
        else:
            check_trace(session)
    return list(llm.requests)


def body(msg: OmniMessage) -> str:
    p = msg.payload
    if isinstance(p, TextPayload):
        return p.text
    assert isinstance(p, ToolCallOutputPayload)
    return f"out {p.tool_call_id}: {p.output}"


def usage() -> OmniMessage:
    return b.token_usage(TokenCounts(cache_write=3, output=1, total=4))


def aborted_signal() -> AbortSignal:
    signal = AbortSignal()
    signal.abort()
    return signal


# --------------------------------------------------------------------------- case 1


async def test_case1_goal_text_downgraded_at_next_run_after_pre_request_abort(env: Env) -> None:
    """R-RUN-5, R-CARRY-12: a goal text carried over from a run aborted before its first
    request is sent downgraded by the next run, live and resumed (R-RESUME-18)."""
    session, llm = await make_session(env, {"responses": [[{"text": "ok"}]], "tools": TOOLS})
    async with session:
        await collect(session.run([b.user_text(GOAL)], signal=aborted_signal()))
        after_abort = session.context.copy()
        task2 = b.user_text("task2")
        await collect(session.run([task2], approve=allow_all))
        check_trace(session)
    live = llm.requests[0]
    assert [body(m) for m in live.messages] == [GOAL_DOWN, "task2"]
    # The same state resumed sends the same request.
    assert after_abort.pending[0].payload.text == GOAL  # type: ignore[union-attr]
    records = [r for r in session_records(env, session.id)]
    cut = next(i for i, r in enumerate(records) if r.type == "event_msg" and _tag(r) == "abort")
    sid = craft(env, records[1 : cut + 1])
    resumed = await first_request_after_resume(env, sid, task2)
    assert resumed[0].messages == live.messages


async def test_case1_goal_text_right_before_the_resumed_prompt_joins_its_prompt_group(
    env: Env,
) -> None:
    """R-CLI-6, R-RUN-5, R-CARRY-12: the last record is a goal text (a crash before its run's
    request).  The records cannot tell it from the first text of a two-text Prompt (the
    ``goal-downgrade-midrun-compaction`` case of ``../shared/cases``, issue 31): the user texts
    recorded before the same ``request_begin`` are one Prompt group, sent as written.  (Issue 13
    had this downgraded; the shared case, the contract of issue 31, has the Prompt raw.)"""
    sid = craft(env, [b.user_text(GOAL)])
    requests = await first_request_after_resume(env, sid, "next")
    assert [body(m) for m in requests[0].messages] == [GOAL, "next"]


async def test_case1_the_runs_own_goal_prompt_and_its_retry_stay_raw(env: Env) -> None:
    """R-CARRY-12 applies to carry-over only; a retry resends the first attempt unchanged
    (INV-14), so the round's own goal prompt is never downgraded within its run."""
    script = [[{"fail": {"status": "timeout", "message": "idle"}}], [{"text": "ok"}]]
    session, llm = await make_session(
        env, {"responses": script, "tools": TOOLS}, retry=RetryPolicy(base_ms=1, cap_ms=1)
    )
    async with session:
        await collect(session.run([b.user_text(GOAL)], approve=allow_all))
        check_trace(session)
    first, retry = llm.requests
    assert [body(m) for m in first.messages] == [GOAL]
    assert retry.messages[: len(first.messages)] == first.messages


# --------------------------------------------------------------------------- case 2


async def test_case2_manual_compaction_folds_a_downgraded_goal_carry_over(env: Env) -> None:
    """R-COMPACT-28, R-CARRY-12: the carry-over folded into a manual compaction's request is
    goal-downgraded, and so is what the summary request commits to history."""
    script = [[{"text": "done"}], [{"text": "[summary]S[/summary]"}]]
    session, llm = await make_session(
        env,
        {"responses": script, "tools": TOOLS},
        compaction=CompactionSettings(prompt=PROMPT),
    )
    async with session:
        await collect(session.run([b.user_text("hi")], approve=allow_all))
        await collect(session.run([b.user_text(GOAL)], signal=aborted_signal()))
        assert await session.compact() == "completed"
        check_trace(session)
    request = llm.requests[-1]
    assert [body(m) for m in request.messages[-2:]] == [GOAL_DOWN, PROMPT]


async def test_case2_failed_manual_compaction_restores_the_raw_carry_over(env: Env) -> None:
    """R-COMPACT-28: nothing committed, the carry-over is restored exactly (the goal text as
    recorded); the next run downgrades it (R-RUN-5)."""
    script = [
        [{"text": "done"}],
        [{"fail": {"status": "auth", "message": "no"}}],
        [{"text": "fine"}],
    ]
    session, llm = await make_session(
        env,
        {"responses": script, "tools": TOOLS},
        compaction=CompactionSettings(prompt=PROMPT),
    )
    async with session:
        await collect(session.run([b.user_text("hi")], approve=allow_all))
        await collect(session.run([b.user_text(GOAL)], signal=aborted_signal()))
        assert await session.compact() == "failed"
        assert [body(m) for m in session.context.pending] == [GOAL]
        await collect(session.run([b.user_text("next")], approve=allow_all))
        check_trace(session)
    assert [body(m) for m in llm.requests[1].messages[-2:]] == [GOAL_DOWN, PROMPT]
    assert [body(m) for m in llm.requests[-1].messages[-2:]] == [GOAL_DOWN, "next"]


# --------------------------------------------------------------------------- case 3


async def test_case3_retry_keeps_placeholders_after_real_outputs(env: Env) -> None:
    """R-CARRY-3, R-RESUME-6 step 3, R-RESUME-9, INV-14: c1 and c2 committed, only c2's output
    recorded, crash.  The first attempt sends [out c2, placeholder c1, again]; its retry resends
    exactly that, placeholders still after the real outputs."""
    sid = craft(
        env,
        [
            b.user_text("go"),
            b.request_begin(),
            b.tool_call("t", {}, "c1"),
            b.approval_decision("allow", "c1"),
            b.tool_call("t", {}, "c2"),
            b.approval_decision("allow", "c2"),
            usage(),
            b.request_end("completed"),
            b.tool_call_output("c2", "two"),
        ],
    )
    script = [[{"fail": {"status": "timeout", "message": "idle"}}], [{"text": "fine"}]]
    first, retry = await first_request_after_resume(env, sid, "again", script)
    tail = [body(m) for m in first.messages[-3:]]
    assert tail == ["out c2: two", f"out c1: {mk.PLACEHOLDER_CRASH}", "again"]
    assert retry.messages[: len(first.messages)] == first.messages
    assert len(retry.messages) <= len(first.messages) + 1


# --------------------------------------------------------------------------- case 4


async def test_case4_abort_inside_the_span_explains_the_placeholder(env: Env) -> None:
    """R-RESUME-10, R-TRACE-15a: the abort written inside the request span (its request_end
    could not be written) ended c1's run, so c1's placeholder says the tool was aborted."""
    sid = craft(
        env,
        [
            b.user_text("go"),
            b.request_begin(),
            b.tool_call("t", {}, "c1"),
            b.approval_decision("allow", "c1"),
            usage(),
            b.abort("trace write failed: disk full"),
        ],
    )
    (request,) = await first_request_after_resume(env, sid, "next")
    assert [body(m) for m in request.messages[-2:]] == [
        f"out c1: {mk.PLACEHOLDER_ABORTED}",
        "next",
    ]


# --------------------------------------------------------------------------- trace helpers


def session_records(env: Env, sid: str) -> list[OmniMessage]:
    from eventstore import read_trace

    return read_trace(env.root.trace_files(sid)).records


def _tag(msg: OmniMessage) -> str:
    return str(msg.payload.__struct_config__.tag)  # type: ignore[union-attr]


def fold_agrees(records: list[OmniMessage]) -> tuple[ModelContext, SessionState]:
    ctx, state = ModelContext.from_records(records), SessionState.from_records(records)
    return ctx, state


def files_of(env: Env, sid: str) -> list[Path]:
    return DataRoot(env.home).trace_files(sid)


def validator_errors(env: Env, sid: str) -> list[str]:
    return [str(f) for f in validate_session(files_of(env, sid)) if f.severity == "error"]


# --------------------------------------------------------------------------- case 5


def copy_session(env: Env, sid: str, stop: Any) -> str:
    """A new session whose file holds ``sid``'s records before the first one ``stop`` picks."""
    records = session_records(env, sid)
    cut = next(i for i, r in enumerate(records) if i > 0 and stop(r))
    return craft(env, records[1:cut])


def is_user_text(text: str) -> Any:
    def pick(msg: OmniMessage) -> bool:
        p = msg.payload
        return isinstance(p, TextPayload) and p.role == "user" and p.text == text

    return pick


async def test_case5_record_too_large_closes_its_span_live(env: Env) -> None:
    """R-TRACE-15a (amended), R-TRACE-17, R-RESUME-18: a record over the size limit inside a
    request span; the live session appends the closure resume would append, right after the
    abort, so its next run sends [[turn_aborted]{hi}, task2] like the resumed one."""
    script = [[{"text": "huge"}], [{"text": "fine"}]]
    session, llm = await make_session(env, {"responses": script, "tools": TOOLS})
    # meta, settings, hi, tool_list_ready, request_begin, then the assistant text fails.
    fault = WriteFault(5, "too_large").install(session)
    async with session:
        first = await collect(session.run([b.user_text("hi")], approve=allow_all))
        assert fault.fired
        assert _tag(first[-1]) == "abort"
        assert not session.broken
        task2 = b.user_text("task2")
        await collect(session.run([task2], approve=allow_all))
        check_trace(session)
    records = session_records(env, session.id)
    kinds = [_tag(r) for r in records[4:7]]
    assert kinds == ["request_begin", "abort", "request_end"]
    live = llm.requests[1]
    block = mk.transcript_block("turn_aborted", [mk.line_user_input("hi")])
    assert [body(m) for m in live.messages] == [block, "task2"]
    sid = copy_session(env, session.id, is_user_text("task2"))
    (resumed,) = await first_request_after_resume(env, sid, task2)
    assert resumed.messages == live.messages


# --------------------------------------------------------------------------- case 6


class Started:
    """A ScriptedLLM that reports each request it receives (to cancel at a known point)."""

    provider = "scripted"
    model_id = "script"
    vision = True

    def __init__(self, script: Any) -> None:
        import anyio

        self.inner = ScriptedLLM(script)
        self.requests = self.inner.requests
        self.started: list[Any] = [anyio.Event() for _ in range(8)]

    def bind(self, session: Session) -> None:
        self.inner.bind(session)

    def stream(self, request: LLMRequest) -> Any:
        self.started[len(self.inner.requests)].set()
        return self.inner.stream(request)


async def test_case6_cancelled_compact_writes_compaction_end_aborted(env: Env) -> None:
    """R-COMPACT-26, R-COMPACT-18: cancelling the task that awaits compact() is recorded as an
    abort (request_end and compaction_end{aborted}) and re-raised; the next run does not re-send
    the compaction prompt, exactly as a resumed session would not."""
    import anyio

    script = [[{"text": "done"}], [{"sleep_ms": 60_000}, {"text": "[summary]S[/summary]"}]]
    script.append([{"text": "fine"}])
    llm = Started({"responses": script, "tools": TOOLS})
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm.inner),
        root=env.root,
        workspace=env.workspace,
        compaction=CompactionSettings(prompt=PROMPT),
    )
    llm.bind(session)
    cancelled = False
    async with session:
        await collect(session.run([b.user_text("hi")], approve=allow_all))
        async with anyio.create_task_group() as tg:
            scope = anyio.CancelScope()

            async def compact() -> None:
                nonlocal cancelled
                with scope:
                    await session.compact()
                cancelled = scope.cancelled_caught

            tg.start_soon(compact)
            await llm.started[1].wait()
            scope.cancel()
        assert cancelled
        assert session.state.open_compaction is None
        nxt = b.user_text("next")
        await collect(session.run([nxt], approve=allow_all))
        check_trace(session)
    records = session_records(env, session.id)
    ends = [r.payload for r in records if _tag(r) == "compaction_end"]
    assert [(e.status, e.attempt) for e in ends] == [("aborted", 1)]  # type: ignore[attr-defined]
    live = llm.requests[2]
    assert PROMPT not in [body(m) for m in live.messages]
    sid = copy_session(env, session.id, is_user_text("next"))
    (resumed,) = await first_request_after_resume(env, sid, nxt)
    assert resumed.messages == live.messages


# --------------------------------------------------------------------------- case 7


async def _compact_with_fault(env: Env, kind: str, at: int) -> tuple[Session, Any, Any]:
    script = [[{"text": "done"}], [{"text": "[summary]S[/summary]"}], [{"text": "fine"}]]
    session, llm = await make_session(
        env, {"responses": script, "tools": TOOLS}, compaction=CompactionSettings(prompt=PROMPT)
    )
    fault = WriteFault(at, kind).install(session)
    raised: BaseException | None = None
    async with session:
        await collect(session.run([b.user_text("hi")], approve=allow_all))
        try:
            await session.compact()
        except BaseException as exc:
            raised = exc
        assert fault.fired
        if not session.broken:
            nxt = b.user_text("next")
            await collect(session.run([nxt], approve=allow_all))
            check_trace(session)
    return session, llm, raised


# First run: meta, hi, tool_list_ready, request_begin, text, token_usage, request_end (0-6);
# compaction: compaction_begin (7), prompt (8), request_begin (9), text (10).
@pytest.mark.parametrize("at", [8, 10])
async def test_case7_compact_write_failure_is_fail_stop(env: Env, at: int) -> None:
    """R-TRACE-15, R-TRACE-15a in compact(): an ENOSPC ends it with an abort, breaks the
    session, and the caller gets the store's TraceWriteError, not an exception group."""
    from eventstore import TraceWriteError

    session, _llm, raised = await _compact_with_fault(env, "enospc", at)
    assert isinstance(raised, TraceWriteError), repr(raised)
    assert session.broken
    records = session_records(env, session.id)
    assert _tag(records[-1]) == "abort"
    assert validator_errors(env, session.id) == []
    # A resume closes the spans the failure left open and the session goes on.
    resumed_session, llm2 = await resume(env, session.id, [[{"text": "fine"}]])
    async with resumed_session:
        await collect(resumed_session.run([b.user_text("next")], approve=allow_all))
        check_trace(resumed_session)
    assert PROMPT not in [body(m) for m in llm2.requests[0].messages]


@pytest.mark.parametrize("at", [8, 10])
async def test_case7_compact_record_too_large_closes_spans(env: Env, at: int) -> None:
    """R-TRACE-17, R-TRACE-15a in compact(): RecordTooLarge is raised to the caller, the abort
    and the closures are written, the session stays usable and its next request equals the
    resumed one (R-RESUME-18)."""
    from eventstore import RecordTooLarge

    session, llm, raised = await _compact_with_fault(env, "too_large", at)
    assert isinstance(raised, RecordTooLarge), repr(raised)
    assert not session.broken
    live = llm.requests[-1]
    assert PROMPT not in [body(m) for m in live.messages]
    sid = copy_session(env, session.id, is_user_text("next"))
    (resumed,) = await first_request_after_resume(env, sid, live.messages[-1])
    assert resumed.messages == live.messages


# --------------------------------------------------------------------------- case 8


@pytest.mark.parametrize("kind", ["enospc", "too_large"])
async def test_case8_failed_session_meta_writes_nothing_else(env: Env, kind: str) -> None:
    """R-TRACE-5, R-TRACE-15a (amended): when the very first record (session_meta) cannot be
    written, nothing else is written: no file holds an abort without a session_meta."""
    session, _llm = await make_session(env, {"responses": [[{"text": "x"}]], "tools": TOOLS})
    WriteFault(0, kind).install(session)
    async with session:
        stream = await collect(session.run([b.user_text("hi")], approve=allow_all))
    assert _tag(stream[-1]) == "abort"
    for path in env.home.rglob("*.jsonl"):
        assert b'"abort"' not in path.read_bytes(), path


# --------------------------------------------------------------------------- R-RESUME-15 / 15b


async def test_r_resume_15_no_summary_when_compaction_begin_was_lost(env: Env) -> None:
    """R-RESUME-15: a completed compaction_end whose compaction_begin line was lost takes no
    summary from an ordinary turn's reply: the closure is void and the file replays on."""
    records = [
        b.user_text("hi"),
        b.request_begin(),
        b.assistant_text("[summary]not a summary[/summary]"),
        usage(),
        b.request_end("completed"),
        b.compaction_end("manual", "summarize", "completed", attempt=1),
    ]
    ctx, state = fold_agrees(records)
    assert ctx.pending_summary is None and not ctx.closed
    assert not state.rotation_pending and state.turns_in_context == 1
    sid = craft(env, records)
    (request,) = await first_request_after_resume(env, sid, "next", damaged=True)
    assert [body(m) for m in request.messages] == ["hi", "[summary]not a summary[/summary]", "next"]


async def test_r_resume_15_summary_only_from_a_span_inside_the_compaction(env: Env) -> None:
    """R-RESUME-15: the summary comes from the last completed request span inside the
    compaction span, never from an earlier compaction's or turn's reply."""
    records = [
        b.user_text("hi"),
        b.request_begin(),
        b.assistant_text("reply"),
        usage(),
        b.request_end("completed"),
        b.compaction_begin("manual", "summarize", context=4, turns=1),
        b.user_text(PROMPT),
        b.request_begin(),
        b.assistant_text("[summary]S1[/summary]"),
        b.tool_call("t", {}, "k1"),
        usage(),
        b.request_end("completed"),
        b.tool_call_output("k1", mk.COMPACTION_REPAIR, stop_reason="failed"),
        b.compaction_end("manual", "summarize", "failed", attempt=1, error_message="x"),
        b.compaction_end("manual", "summarize", "completed", attempt=1),  # begin lost
    ]
    ctx, state = fold_agrees(records)
    assert ctx.pending_summary is None and not ctx.closed
    assert not state.rotation_pending


async def test_r_resume_15b_lost_request_end_is_a_failed_attempt(env: Env) -> None:
    """R-RESUME-15b: a request_begin while a span is open (its request_end was lost) ends the
    open span as a failed attempt: its output goes into the next attempt's [turn_retried]
    block, and no [turn_aborted] block is made from it."""
    records = [
        b.user_text("hi"),
        b.request_begin(),
        b.assistant_text("half"),
        b.request_begin(),
        b.assistant_text("again"),
        b.request_end("aborted"),
    ]
    sid = craft(env, records)
    (request,) = await first_request_after_resume(env, sid, "next", damaged=True)
    texts = [body(m) for m in request.messages]
    assert texts[-1] == "next"
    block = texts[0]
    assert block.startswith("[turn_aborted]\n  [user_input]hi[/user_input]")
    assert "[turn_retried]" not in block  # one level (R-CARRY-6)
    assert mk.line_text("half") in block and mk.line_text("again") in block
    # The crash-ended first span alone is a retry shape: input kept, one [turn_retried] block.
    ctx = ModelContext.from_records(records[:4])
    retry_input = ctx.snapshot
    assert [body(m) for m in retry_input] == [
        "hi",
        mk.transcript_block("turn_retried", [mk.line_text("half")]),
    ]


async def test_r_resume_15b_compaction_end_closes_an_open_span_like_14a(env: Env) -> None:
    """R-RESUME-15b: a compaction_end reached while a request span inside it is open closes
    that span first, committed when its token_usage was recorded: its summary counts."""
    records = [
        b.user_text("hi"),
        b.request_begin(),
        b.assistant_text("reply"),
        usage(),
        b.request_end("completed"),
        b.compaction_begin("manual", "summarize", context=4, turns=1),
        b.user_text(PROMPT),
        b.request_begin(),
        b.assistant_text("[summary]S[/summary]"),
        usage(),
        b.compaction_end("manual", "summarize", "completed", attempt=1),
    ]
    ctx, state = fold_agrees(records)
    assert ctx.closed and ctx.pending_summary is not None
    assert body(ctx.pending_summary) == mk.wrap_context_summary("S")
    assert state.rotation_pending and state.turns_in_context == 0
    assert state.turns_total == 1


async def test_leaving_the_session_aborts_a_manual_compaction(env: Env) -> None:
    """R-SESSION-2, R-COMPACT-18: leaving the session's ``async with`` while another task awaits
    compact() aborts the compaction (compaction_end{aborted}) instead of waiting for it."""
    import anyio

    script = [[{"text": "done"}], [{"sleep_ms": 60_000}, {"text": "[summary]S[/summary]"}]]
    llm = Started({"responses": script, "tools": TOOLS})
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm.inner),
        root=env.root,
        workspace=env.workspace,
        compaction=CompactionSettings(prompt=PROMPT),
    )
    llm.bind(session)
    results: list[str | None] = []

    async def compact() -> None:
        results.append(await session.compact())

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg, session:
            await collect(session.run([b.user_text("hi")], approve=allow_all))
            tg.start_soon(compact)
            await llm.started[1].wait()
    assert results == ["aborted"]
    records = session_records(env, session.id)
    assert _tag(records[-1]) == "compaction_end"
    assert records[-1].payload.status == "aborted"  # type: ignore[union-attr]
    assert validator_errors(env, session.id) == []


async def test_record_too_large_after_a_rotation_head_goes_on_in_that_file(env: Env) -> None:
    """R-TRACE-8, R-TRACE-15a, R-ROOT-10, INV-24 (found by the widened property test): a record
    refused right after a rotation head leaves the head alone in the new file, which resume
    ignores as residue; the live session folds that head only with the next record it writes
    there (no second rotation), so its projections and next request equal the resumed ones."""
    script = [[{"text": "done"}], [{"text": "[summary]S[/summary]"}], [{"text": "fine"}]]
    session, llm = await make_session(
        env,
        {"responses": script, "tools": TOOLS},
        compaction=CompactionSettings(max_context_length=1, prompt=PROMPT),
    )
    fault = WriteFault(-1, "too_large").install(session)
    async with session:
        await collect(session.run([b.user_text("hi")], approve=allow_all))
        assert session.state.rotation_pending
        # session_meta, tool_list_ready, settings (R-SET-2c), then the summary
        fault.at = fault.count + 3
        await collect(session.run([b.user_text("task2")], approve=allow_all))
        assert fault.fired and not session.broken
        records = session_records(env, session.id)
        assert SessionState.from_records(records) == session.state
        assert ModelContext.from_records(records) == session.context
        task3 = b.user_text("task3")
        await collect(session.run([task3], approve=allow_all))
        check_trace(session)
    files = files_of(env, session.id)
    assert len(files) == 2
    live = llm.requests[2]
    assert [body(m) for m in live.messages] == [mk.wrap_context_summary("S"), "task3"]
    # The state before task3, resumed: cut the second file where task3 was recorded.
    lines = files[1].read_bytes().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if b'"text":"task3"' in line)
    files[1].write_bytes(b"".join(lines[:at]))
    (resumed,) = await first_request_after_resume(env, session.id, task3)
    assert resumed.messages == live.messages
