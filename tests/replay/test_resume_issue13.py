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
from enginekit import Env, check_trace, collect, make_env, make_session

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
    env: Env, sid: str, prompt: str | OmniMessage = "next", responses: list[Any] | None = None
) -> list[LLMRequest]:
    session, llm = await resume(env, sid, responses or [[{"text": "fine"}]])
    message = b.user_text(prompt) if isinstance(prompt, str) else prompt
    async with session:
        await collect(session.run([message], approve=allow_all))
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


async def test_case1_goal_text_downgraded_after_a_crash_cut_after_it(env: Env) -> None:
    """R-RUN-5, R-CARRY-12: the last record is the goal round's prompt (a crash): the resumed
    run sends it downgraded before its own prompt."""
    sid = craft(env, [b.user_text(GOAL)])
    requests = await first_request_after_resume(env, sid, "next")
    assert [body(m) for m in requests[0].messages] == [GOAL_DOWN, "next"]


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
