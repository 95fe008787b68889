"""Compaction (SPEC §10): triggers, modes, failure, manual, rotation, and exact resume."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest
from enginekit import (
    Env,
    assert_requests_paired,
    check_trace,
    collect,
    kinds,
    make_session,
    texts,
    trace_records,
)

from engine import AbortSignal, CompactionSettings, RetryPolicy, allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import (
    AbortPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    DataRoot,
    OmniMessage,
    ToolCallOutputPayload,
)
from eventstore import builders as b
from projections import DEFAULT_COMPACTION_PROMPT
from replay import resume_session

pytestmark = pytest.mark.anyio
TOOLS = [{"name": "t", "description": "test tool"}]
BIG = {"usage": {"cache_write": 1000}}
LOW = CompactionSettings(max_context_length=500)


def ends(records: list[OmniMessage]) -> list[CompactionEndPayload]:
    return [r.payload for r in records if isinstance(r.payload, CompactionEndPayload)]


async def test_context_trigger_summarize_at_boundary(env: Env) -> None:
    """R-COMPACT-3/6/7/12/13, R-TRACE-8, INV-15/20: summary held; next run starts the next file
    with its head and the summary first; the compaction request keeps the prefix."""
    script = {
        "responses": [
            [{"text": "answer"}, BIG],
            [{"text": "[summary]the gist[/summary]"}],
            [{"text": "second"}],
        ],
        "tools": TOOLS,
    }
    session, llm = await make_session(env, script, compaction=LOW)
    async with session:
        stream = await collect(session.run([b.user_text("go")]))
        check_trace(session, stream)
        assert session.compactability() == "just_compacted"
        first_file = session.trace_path
        # INV-9: between the compaction events only text, partial_text and token_usage.
        ks = kinds(stream)
        inner = ks[ks.index("compaction_begin") + 1 : ks.index("compaction_end")]
        assert set(inner) <= {"partial_text", "text", "token_usage"}
        await collect(session.run([b.user_text("more")]))
        records = check_trace(session)
        assert session.trace_path.name.endswith("_002.jsonl")
        assert first_file.name.endswith("_001.jsonl")
    compaction_req, third = llm.requests[1], llm.requests[2]
    # INV-15: same system prompt and tools, messages start with the history unchanged.
    assert compaction_req.system_prompt == llm.requests[0].system_prompt
    assert msgspec.json.encode(compaction_req.tools) == msgspec.json.encode(llm.requests[0].tools)
    assert (
        compaction_req.messages[:2]
        == llm.requests[0].messages
        + [m for m in trace_records(session) if texts([m]) == ["answer"]][:1]
    )
    assert texts(compaction_req.messages)[-1] == DEFAULT_COMPACTION_PROMPT
    assert compaction_req.thinking_level is None
    assert texts(third.messages) == ["[context_summary]\nthe gist\n[/context_summary]", "more"]
    file2 = [r for r in records if r.timestamp][kinds(records).index("session_meta", 1) :]
    # R-SET-2c: the settings the file is written under, right after tool_list_ready.
    assert kinds(file2)[:5] == ["session_meta", "tool_list_ready", "settings", "text", "text"]


async def test_turns_trigger_and_equality(env: Env) -> None:
    """R-COMPACT-3: turns in context >= max_session_turns (=1 compacts after the first turn)."""
    script = [[{"text": "a"}], [{"text": "[summary]s[/summary]"}]]
    settings = CompactionSettings(max_session_turns=1)
    session, _ = await make_session(env, script, compaction=settings)
    async with session:
        stream = await collect(session.run([b.user_text("go")]))
        records = check_trace(session, stream)
    begin = next(r.payload for r in records if isinstance(r.payload, CompactionBeginPayload))
    assert (begin.reason, begin.turns) == ("turns", 1)


async def test_discard_at_boundary(env: Env) -> None:
    """R-COMPACT-5: no request; the next run's input is used unchanged."""
    script = [[{"text": "a"}, BIG], [{"text": "b"}]]
    session, llm = await make_session(
        env, script, compaction=CompactionSettings(max_context_length=500, mode="discard")
    )
    async with session:
        stream = await collect(session.run([b.user_text("go")]))
        check_trace(session, stream)
        assert kinds(stream)[-2:] == ["compaction_begin", "compaction_end"]
        await collect(session.run([b.user_text("fresh")]))
        check_trace(session)
    assert len(llm.requests) == 2
    assert texts(llm.requests[1].messages) == ["fresh"]
    end = ends(trace_records(session))[0]
    assert end.attempt is None


async def test_mid_task_summarize_continues(env: Env) -> None:
    """R-COMPACT-13: mid-task, the summary is written at once and the task goes on."""
    script = {
        "responses": [
            [
                {"tool_call": {"name": "t", "arguments": {}, "id": "a", "result": {"output": "A"}}},
                BIG,
            ],
            [{"text": "[summary]did a[/summary]"}],
            [{"text": "finished"}],
        ],
        "tools": TOOLS,
    }
    session, llm = await make_session(env, script, compaction=LOW)
    async with session:
        stream = await collect(session.run([b.user_text("go")], approve=allow_all))
        check_trace(session, stream)
    compaction_req, cont = llm.requests[1], llm.requests[2]
    assert texts(compaction_req.messages)[-2:] == ["A", DEFAULT_COMPACTION_PROMPT]
    assert texts(cont.messages) == ["[context_summary]\ndid a\n[/context_summary]"]
    assert_requests_paired(llm.requests)


async def test_failed_compaction_keeps_context(env: Env) -> None:
    """R-COMPACT-19/22: budget exhausted -> failed; context and file kept; re-triggers."""
    fail = [{"fail": {"status": "timeout", "message": "slow"}}]
    script = [
        [{"text": "a"}, BIG],
        fail,
        fail,
        [{"text": "b"}, BIG],
        [{"text": "[summary]ok now[/summary]"}],
    ]
    session, llm = await make_session(
        env, script, compaction=LOW, retry=RetryPolicy(max_reconnects=1, base_ms=1)
    )
    async with session:
        stream = await collect(session.run([b.user_text("go")]))
        check_trace(session, stream)
        first = ends(trace_records(session))
        assert [(e.status, e.attempt, e.error_message) for e in first] == [("failed", 2, "slow")]
        assert session.trace_path.name.endswith("_001.jsonl")
        assert not any(isinstance(m.payload, AbortPayload) for m in stream)
        await collect(session.run([b.user_text("again")]))
        check_trace(session)
        assert [e.status for e in ends(trace_records(session))] == ["failed", "completed"]
    # The failed compaction left the history intact: the next turn saw "a".
    assert "a" in texts(llm.requests[3].messages)
    assert DEFAULT_COMPACTION_PROMPT not in texts(llm.requests[3].messages)


@pytest.mark.parametrize(
    "bad",
    [
        [{"tool_call": {"name": "t", "arguments": {}, "id": "x"}}],
        [{"text": "[summary]\n[/summary]"}],
    ],
)
async def test_unusable_attempt_repaired_then_retried(env: Env, bad: list[Any]) -> None:
    """R-COMPACT-11/14/15/20: tool calls get repairs; a corrective note; prompt re-sent."""
    script = {
        "responses": [[{"text": "a"}, BIG], bad, [{"text": "[summary]fine[/summary]"}]],
        "tools": TOOLS,
    }
    session, llm = await make_session(env, script, compaction=LOW)
    async with session:
        stream = await collect(session.run([b.user_text("go")]))
        records = check_trace(session, stream)
    retry_req = llm.requests[2]
    tail = texts(retry_req.messages)
    assert tail[-1] == DEFAULT_COMPACTION_PROMPT
    assert tail[-2].startswith("That reply cannot be used as a summary.")
    repairs = [r for r in records if isinstance(r.payload, ToolCallOutputPayload)]
    if "tool_call" in bad[0]:
        assert [(r.payload.output, r.payload.stop_reason) for r in repairs] == [  # type: ignore[union-attr]
            ("[tool error] the compaction request expects a summary, not tool calls", "failed")
        ]
        assert tail[-3] == repairs[0].payload.output  # type: ignore[union-attr]
    assert [(e.status, e.attempt) for e in ends(records)] == [("completed", 2)]
    assert not any(isinstance(m.payload, ToolCallOutputPayload) for m in stream)
    assert_requests_paired(llm.requests)


async def test_manual_compaction_and_compactability(env: Env) -> None:
    """R-COMPACT-25/26: empty -> no-op None; ok -> status; unsupported without settings."""
    script = [[{"text": "a"}], [{"text": "[summary]manual[/summary]"}], [{"text": "b"}]]
    session, llm = await make_session(env, script, compaction=CompactionSettings())
    seen: list[OmniMessage] = []
    async with session:
        assert session.compactability() == "empty"
        assert await session.compact() is None
        assert not session.trace_path.exists()
        await collect(session.run([b.user_text("go")]))
        assert session.compactability() == "ok"
        assert await session.compact(on_message=seen.append) == "completed"
        assert session.compactability() == "just_compacted"
        await collect(session.run([b.user_text("after")]))
        check_trace(session)
    assert kinds(seen)[0] == "compaction_begin" and kinds(seen)[-1] == "compaction_end"
    assert texts(llm.requests[2].messages) == [
        "[context_summary]\nmanual\n[/context_summary]",
        "after",
    ]
    session2, _ = await make_session(env, [], compaction=None)
    assert session2.compactability() == "unsupported"


async def test_abort_during_mid_task_compaction(env: Env) -> None:
    """R-COMPACT-18/23: mid-task abort ends the run with `aborted during compaction`."""
    script = {
        "responses": [
            [
                {"tool_call": {"name": "t", "arguments": {}, "id": "a", "result": {"output": "A"}}},
                BIG,
            ],
            [{"sleep_ms": 600000}, {"text": "[summary]never[/summary]"}],
            [{"text": "next"}],
        ],
        "tools": TOOLS,
    }
    session, _ = await make_session(env, script, compaction=LOW)
    signal = AbortSignal()

    async def on(msg: OmniMessage) -> None:
        if isinstance(msg.payload, CompactionBeginPayload):
            signal.abort()

    async with session:
        stream = await collect(
            session.run([b.user_text("go")], approve=allow_all, signal=signal), on=on
        )
        records = check_trace(session, stream)
        assert stream[-1].payload == AbortPayload(reason="aborted during compaction")
        assert [e.status for e in ends(records)] == ["aborted"]
        carry = session.context.pending
    assert [m.payload.output for m in carry] == ["A"]  # type: ignore[union-attr]


@pytest.mark.parametrize("point", ["after_compaction", "after_failed_attempt"])
async def test_resume_after_compaction_events(env: Env, tmp_path: Path, point: str) -> None:
    """R-RESUME-15/18, INV-27: resume right after a compaction gives the live next request."""
    if point == "after_compaction":
        script = [[{"text": "a"}, BIG], [{"text": "[summary]kept[/summary]"}], [{"text": "z"}]]
    else:
        script = [
            [{"text": "a"}, {"fail": {"status": "timeout", "message": "x"}}],
            [{"text": "a2"}],
            [{"text": "z"}],
        ]
    session, llm = await make_session(env, script, compaction=LOW)
    prompt = b.user_text("next")
    async with session:
        await collect(session.run([b.user_text("go")]))
        before = session.compactability()
        copy = tmp_path / "copy"
        shutil.copytree(env.home, copy)
        await collect(session.run([prompt]))
        live = llm.requests[-1]
    rest = ScriptedLLM(script[len(llm.requests) - 1 :])
    resumed = await resume_session(
        DataRoot(copy), session.id, llm=rest, environment=ScriptedEnvironment([]), compaction=LOW
    )
    assert resumed.compactability() == before
    async with resumed:
        await collect(resumed.run([prompt]))
        check_trace(resumed)
    assert rest.requests[-1].messages == live.messages


async def test_manual_discard_drops_carry_over(env: Env) -> None:
    """R-COMPACT-27: manual discard drops the whole carry-over; the next run starts empty."""
    script = [[{"text": "a"}, {"fail": {"status": "auth"}}], [{"text": "b"}]]
    session, llm = await make_session(
        env, [[{"text": "x"}], *script], compaction=CompactionSettings(mode="discard")
    )
    async with session:
        await collect(session.run([b.user_text("one")]))
        await collect(session.run([b.user_text("two")]))
        assert session.context.pending  # the auth failure left a carry-over
        assert await session.compact() == "completed"
        assert session.context.pending == []
        await collect(session.run([b.user_text("three")]))
        records = check_trace(session)
    assert texts(llm.requests[-1].messages) == ["three"]
    assert [(e.reason, e.mode, e.status) for e in ends(records)] == [
        ("manual", "discard", "completed")
    ]
