"""The run loop (SPEC §5) and its stream/trace invariants (§17)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
from enginekit import (
    Env,
    GatedEnvironment,
    assert_requests_paired,
    check_trace,
    collect,
    complete,
    kinds,
    make_session,
    texts,
)

from engine import AbortSignal, LLMOutcome, RetryPolicy, SessionBusy, allow_all
from eventstore import (
    ApprovalDecisionPayload,
    OmniMessage,
    SubagentPayload,
    TextPayload,
    TokenCounts,
    TokenUsagePayload,
    ToolCallOutputPayload,
)
from eventstore import builders as b

pytestmark = pytest.mark.anyio


async def test_plain_text_stream_and_trace(env: Env) -> None:
    """R-RUN-6, INV-4, INV-5, INV-7: the prompt is written, not yielded; tool_list_ready first."""
    session, llm = await make_session(env, [[{"text": "Four.", "chunks": 2}]])
    async with session:
        stream = await collect(session.run([b.user_text("What is 2 + 2?")]))
        records = check_trace(session, stream)
    assert kinds(stream) == [
        "tool_list_ready",
        "request_begin",
        "partial_text",
        "partial_text",
        "partial_text",
        "partial_text",
        "text",
        "token_usage",
        "request_end",
    ]
    assert kinds(records) == [
        "session_meta",
        "settings",  # R-SET-2a: before the first run's input
        "text",
        "tool_list_ready",
        "request_begin",
        "text",
        "token_usage",
        "request_end",
    ]
    assert not any(getattr(m.payload, "text", None) == "What is 2 + 2?" for m in stream)
    req = llm.requests[0]
    assert req.new_messages == 1 and texts(req.messages) == ["What is 2 + 2?"]  # INV-16
    assert req.system_prompt == "You are careful."


async def test_tools_complete_out_of_order_next_input_in_call_order(env: Env) -> None:
    """R-RUN-14/15, INV-6, INV-13: outputs stream in completion order, go back in call order."""
    gated = GatedEnvironment()
    script = [
        [
            {"tool_call": {"name": "t", "arguments": {"n": 1}, "id": "a"}},
            {"tool_call": {"name": "t", "arguments": {"n": 2}, "id": "b"}},
        ],
        [{"text": "done"}],
    ]
    session, llm = await make_session(env, script, environment=gated)

    async def on(msg: OmniMessage) -> None:
        # Release b first, then a once b's output is out: completion order b, a.
        tag = msg.payload.__struct_config__.tag  # type: ignore[union-attr]
        if tag == "request_end" and len(llm.requests) == 1:
            await gated.start_event("b").wait()
            gated.release("b")
        p = msg.payload
        if isinstance(p, ToolCallOutputPayload) and p.tool_call_id == "b" and not msg.is_partial:
            gated.release("a")

    async with session:
        stream = await collect(session.run([b.user_text("go")], approve=allow_all), on=on)
        check_trace(session, stream)
    outputs = [
        m.payload.tool_call_id
        for m in complete(stream)
        if isinstance(m.payload, ToolCallOutputPayload)
    ]
    assert outputs == ["b", "a"]
    second = llm.requests[1]
    assert [m.payload.tool_call_id for m in second.messages[-2:]] == ["a", "b"]  # type: ignore[union-attr]
    assert second.new_messages == 2
    # INV-6: the second request_begin comes after both outputs.
    ks = kinds(complete(stream))
    assert ks.index("request_begin", ks.index("request_begin") + 1) > max(
        i for i, k in enumerate(ks) if k == "tool_call_output"
    )
    assert_requests_paired(llm.requests)


async def test_request_end_does_not_wait_for_tools(env: Env) -> None:
    """R-RUN-13: request_end is emitted while a tool still runs; its output comes after."""
    gated = GatedEnvironment()
    script = [[{"tool_call": {"name": "t", "arguments": {}, "id": "x"}}], [{"text": "ok"}]]
    session, _ = await make_session(env, script, environment=gated)

    async def on(msg: OmniMessage) -> None:
        if msg.type == "event_msg" and msg.payload.__struct_config__.tag == "request_end":  # type: ignore[union-attr]
            gated.release("x")

    async with session:
        stream = await collect(session.run([b.user_text("go")], approve=allow_all), on=on)
        check_trace(session, stream)
    ks = kinds(complete(stream))
    assert ks.index("request_end") < ks.index("tool_call_output")


@pytest.mark.parametrize(
    ("approve", "decision", "text", "status"),
    [
        (lambda call: "deny", "deny", "Tool call denied by user.", "aborted"),
        (lambda call: "forbidden", "forbidden", "Tool call denied by policy.", "aborted"),
        (None, "deny", "Tool call denied by user.", "aborted"),
        (lambda call: 1 / 0, "deny", "Tool call denied by user.", "aborted"),
        (lambda call: "maybe", "deny", "Tool call denied by user.", "aborted"),
    ],
)
async def test_approval_decisions(
    env: Env,
    approve: Any,
    decision: str,
    text: str,
    status: str,
    reported: Callable[[], str],
) -> None:
    """R-APPROVE-2/3, R-RUN-2, INV-22: denials answer at once; a raising approve denies."""
    script = {
        "responses": [
            [{"tool_call": {"name": "t", "arguments": {}, "id": "c", "result": {"output": "ran"}}}],
            [{"text": "ok"}],
        ],
        "tools": [{"name": "t", "description": "d"}],
    }
    session, llm = await make_session(env, script)
    async with session:
        stream = await collect(session.run([b.user_text("go")], approve=approve))
        check_trace(session, stream)
    decisions = [m.payload for m in stream if isinstance(m.payload, ApprovalDecisionPayload)]
    assert [d.decision for d in decisions] == [decision]
    out = [m.payload for m in complete(stream) if isinstance(m.payload, ToolCallOutputPayload)]
    assert [(o.output, o.stop_reason) for o in out] == [(text, status)]
    err = reported()
    if approve is not None and decision == "deny":
        try:
            value = approve(None)
        except ZeroDivisionError:
            assert "[penguin] approve callback threw: division by zero; denying." in err
        else:
            if value == "maybe":
                assert "invalid approval 'maybe'" in err
    assert_requests_paired(llm.requests)


async def test_approvals_are_sequential(env: Env) -> None:
    """R-APPROVE-1: the engine reads no LLM item while an approval is pending."""
    order: list[str] = []
    gate = anyio.Event()
    script = {
        "responses": [
            [
                {"tool_call": {"name": "t", "arguments": {}, "id": "a"}},
                {"tool_call": {"name": "t", "arguments": {}, "id": "b"}},
            ],
            [{"text": "ok"}],
        ],
        "tools": [{"name": "t", "description": "d"}],
    }
    session, _ = await make_session(env, script)

    async def approve(call: OmniMessage) -> str:
        cid = call.payload.tool_call_id  # type: ignore[union-attr]
        order.append(f"ask {cid}")
        if cid == "a":
            await gate.wait()
        order.append(f"answer {cid}")
        return "allow"

    async def on(msg: OmniMessage) -> None:
        pass

    async with session:
        async with anyio.create_task_group() as tg:

            async def consume() -> None:
                await collect(session.run([b.user_text("go")], approve=approve))

            tg.start_soon(consume)
            await anyio.wait_all_tasks_blocked()
            assert order == ["ask a"]
            gate.set()
        check_trace(session)
    assert order == ["ask a", "answer a", "ask b", "answer b"]


async def test_max_turns_notice_and_carry_over(env: Env) -> None:
    """R-MAXT-1/2: the notice is a failed assistant segment; the pending input carries over."""
    script = {
        "responses": [
            [
                {
                    "tool_call": {
                        "name": "t",
                        "arguments": {},
                        "id": "c1",
                        "result": {"output": "one"},
                    }
                }
            ],
            [
                {
                    "tool_call": {
                        "name": "t",
                        "arguments": {},
                        "id": "c2",
                        "result": {"output": "two"},
                    }
                }
            ],
            [{"text": "next run"}],
        ],
        "tools": [{"name": "t", "description": "d"}],
    }
    session, llm = await make_session(env, script, max_turns=2)
    async with session:
        stream = await collect(session.run([b.user_text("go")], approve=allow_all))
        check_trace(session, stream)
        tail = stream[-4:]
        assert kinds(tail) == ["partial_text", "partial_text", "partial_text", "text"]
        assert tail[1].payload.text == "[reached max turns (2); stopping]"  # type: ignore[union-attr]
        assert tail[2].payload.stop_reason == "failed"  # type: ignore[union-attr]
        assert tail[3].payload.stop_reason == "failed"  # type: ignore[union-attr]
        assert not any(k == "abort" for k in kinds(stream))
        assert [getattr(m.payload, "output", None) for m in session.context.pending] == ["two"]
        await collect(session.run([b.user_text("continue")], approve=allow_all))
        check_trace(session)
    last = llm.requests[-1]
    assert texts(last.messages[-2:]) == ["two", "continue"]
    assert last.new_messages == 2


async def test_session_busy_and_lazy_generator(env: Env) -> None:
    """R-RUN-1: a second run raises SessionBusy on first iteration; an un-iterated generator
    starts nothing and writes nothing (R-TRACE-6)."""
    gated = GatedEnvironment()
    script = [[{"tool_call": {"name": "t", "arguments": {}, "id": "x"}}], [{"text": "ok"}]]
    session, _ = await make_session(env, script, environment=gated)
    async with session:
        idle = session.run([b.user_text("never")])
        assert not session.trace_path.exists()
        await idle.aclose()
        first = session.run([b.user_text("go")], approve=allow_all)
        got = await first.__anext__()
        assert got.payload.__struct_config__.tag == "tool_list_ready"  # type: ignore[union-attr]
        with pytest.raises(SessionBusy):
            await session.run([b.user_text("again")]).__anext__()
        await gated.start_event("x").wait()
        gated.release("x")
        await collect(first)
        check_trace(session)


async def test_environment_raising_gives_tool_error(env: Env) -> None:
    """R-TOOL-6: an Environment that raises before its output yields a failed output."""

    class Boom(GatedEnvironment):
        async def execute(self, call: OmniMessage, *, signal: AbortSignal, approve: Any):  # type: ignore[override]
            raise RuntimeError("kaput")
            yield call  # pragma: no cover

    script = [[{"tool_call": {"name": "t", "arguments": {}, "id": "x"}}], [{"text": "ok"}]]
    session, _ = await make_session(env, script, environment=Boom())
    async with session:
        stream = await collect(session.run([b.user_text("go")], approve=allow_all))
        check_trace(session, stream)
    out = [m.payload for m in complete(stream) if isinstance(m.payload, ToolCallOutputPayload)]
    assert [(o.output, o.stop_reason) for o in out] == [("[tool error] kaput", "failed")]


async def test_llm_raising_is_failed_and_retried(env: Env) -> None:
    """R-RUN-3: an LLM that raises is a `failed` outcome with the exception text."""

    class Flaky:
        vision = True
        provider = "test"
        model_id = "flaky"

        def __init__(self) -> None:
            self.calls = 0

        async def stream(self, request: Any) -> Any:
            self.calls += 1
            if self.calls == 1:
                yield b.partial_text("start")
                yield b.partial_text("delta", "par")
                raise ValueError("socket closed")
            yield b.assistant_text("fine")
            yield b.token_usage(TokenCounts(0, 1, 1, 2))
            yield LLMOutcome("completed")

    from engine import Session
    from engine.llm import ScriptedEnvironment

    llm = Flaky()
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment([]),
        root=env.root,
        workspace=env.workspace,
        compaction=None,
    )
    async with session:
        stream = await collect(session.run([b.user_text("go")]))
        check_trace(session, stream)
    ends = [m.payload for m in stream if m.payload.__struct_config__.tag == "request_end"]  # type: ignore[union-attr]
    assert ends[0].status == "failed" and ends[0].error_message == "socket closed"  # type: ignore[union-attr]
    assert ends[0].attempt == 1 and ends[0].retry_in_ms == 250  # type: ignore[union-attr]
    # R-STREAM-4: the open segment was closed by the engine with the failure status.
    closed = [
        m
        for m in stream
        if isinstance(m.payload, TextPayload) and m.payload.stop_reason == "failed"
    ]
    assert [m.payload.text for m in closed] == ["par"]  # type: ignore[union-attr]
    assert ends[1].status == "completed" and ends[1].attempt == 2  # type: ignore[union-attr]


async def test_token_usage_session_counts_accumulate(env: Env) -> None:
    """R-RUN-10: the engine restamps `session` as the running sum of `request` counts."""
    script = [
        [{"text": "a"}, {"usage": {"cache_write": 10, "output": 2}}],
        [{"text": "b"}, {"usage": {"cache_read": 5, "cache_write": 1, "output": 1}}],
    ]
    session, _ = await make_session(env, script)
    async with session:
        await collect(session.run([b.user_text("one")]))
        stream = await collect(session.run([b.user_text("two")]))
        check_trace(session, stream)
    usage = [m.payload for m in stream if isinstance(m.payload, TokenUsagePayload)]
    assert usage[-1].session.total == 12 + 7
    assert usage[-1].session.cache_read == 5
    assert session.state.session_tokens.total == 19


async def test_origin_tagged_messages_streamed_not_written(env: Env) -> None:
    """R-SUB-2/3, INV-10: child messages pass through; a child's session_meta becomes a
    `subagent` pointer written (not yielded)."""
    child = "session-2026-07-18-11-12-00-a1b2c3d4"

    class Parent(GatedEnvironment):
        async def execute(self, call: OmniMessage, *, signal: AbortSignal, approve: Any):  # type: ignore[override]
            cid = call.payload.tool_call_id  # type: ignore[union-attr]
            meta = b.session_meta(
                session_id=child,
                provider="p",
                model_id="m",
                model_context_window="unknown",
                system_prompt="",
                agent_state="/a",
                workspace="/w",
            )
            yield OmniMessage(meta.timestamp, meta.type, meta.payload, [child])
            inner = b.tool_call_output("inner", "child output")
            yield OmniMessage(inner.timestamp, inner.type, inner.payload, [child])
            yield b.tool_call_output(cid, "parent output")

    script = [[{"tool_call": {"name": "t", "arguments": {}, "id": "x"}}], [{"text": "ok"}]]
    session, llm = await make_session(env, script, environment=Parent())
    async with session:
        stream = await collect(session.run([b.user_text("go")], approve=allow_all))
        records = check_trace(session, stream)
    assert [m.origin for m in stream if m.origin] == [[child], [child]]
    assert [r.payload.session_id for r in records if isinstance(r.payload, SubagentPayload)] == [
        child
    ]
    assert not any(isinstance(m.payload, SubagentPayload) for m in stream)
    assert texts(llm.requests[1].messages)[-1] == "parent output"
    assert_requests_paired(llm.requests)


async def test_leaving_the_session_closes_environment(env: Env) -> None:
    """R-SESSION-2: environment.aclose() runs when the session closes."""
    gated = GatedEnvironment()
    session, _ = await make_session(env, [[{"text": "hi"}]], environment=gated)
    async with session:
        await collect(session.run([b.user_text("go")]))
    assert gated.closed


async def test_workspace_must_exist(env: Env) -> None:
    """R-SESSION-1: a missing workspace is an error, never created."""
    from engine import Session
    from engine.llm import ScriptedEnvironment, ScriptedLLM

    with pytest.raises(FileNotFoundError):
        await Session.create(
            llm=ScriptedLLM([]),
            environment=ScriptedEnvironment([]),
            root=env.root,
            workspace=env.workspace / "missing",
        )
    (env.workspace / "f").write_text("x")
    with pytest.raises(NotADirectoryError):
        await Session.create(
            llm=ScriptedLLM([]),
            environment=ScriptedEnvironment([]),
            root=env.root,
            workspace=env.workspace / "f",
        )


async def test_completed_stream_with_an_open_segment_is_malformed(env: Env) -> None:
    """R-STREAM-4: the engine closes a segment the producer leaked; a stream that claimed
    `completed` with one open was cut short, so the attempt is `malformed` and retried, and its
    half tool call is never dispatched."""

    class Leaky:
        vision = True

        def __init__(self) -> None:
            self.calls = 0

        async def stream(self, request: Any) -> Any:
            self.calls += 1
            if self.calls == 1:
                yield b.partial_tool_call("start", "x", name="t")
                yield b.partial_tool_call("delta", "x", arguments='{"a":')
                yield LLMOutcome("completed")
                return
            yield b.assistant_text("fine")
            yield LLMOutcome("completed")

    from engine import Session

    gated = GatedEnvironment()
    session = await Session.create(
        llm=Leaky(),
        environment=gated,
        root=env.root,
        workspace=env.workspace,
        compaction=None,
        retry=RetryPolicy(base_ms=1),
    )
    async with session:
        stream = await collect(session.run([b.user_text("go")], approve=allow_all))
        check_trace(session, stream)
    ends = [m.payload for m in stream if m.payload.__struct_config__.tag == "request_end"]  # type: ignore[union-attr]
    assert [(e.status, e.error_message) for e in ends] == [  # type: ignore[union-attr]
        ("malformed", "the response ended with an unclosed segment"),
        ("completed", None),
    ]
    calls = [m for m in complete(stream) if m.payload.__struct_config__.tag == "tool_call"]  # type: ignore[union-attr]
    assert [(c.payload.arguments, c.payload.stop_reason) for c in calls] == [('{"a":', "malformed")]  # type: ignore[union-attr]
    assert gated.started == {}


async def test_a_scope_cancelled_mid_burst_stops_the_stream_before_the_next_message(
    env: Env,
) -> None:
    """``run()`` yields what the driver pushed in one step without a scheduler pass per message,
    yet a cancellation of the caller's own scope still lands before the next message (as at any
    anyio checkpoint); leaving the stream that way is safe (R-CARRY-2)."""
    session, _ = await make_session(env, [[{"text": "one two three four", "chunks": 4}]])
    seen: list[OmniMessage] = []
    async with session:
        with anyio.CancelScope() as scope:
            async for msg in session.run([b.user_text("go")]):
                seen.append(msg)
                if kinds([msg]) == ["partial_text"]:
                    scope.cancel()  # the rest of the segment is already on the stream
        assert scope.cancelled_caught
        check_trace(session)
    assert kinds(seen) == ["tool_list_ready", "request_begin", "partial_text"]
