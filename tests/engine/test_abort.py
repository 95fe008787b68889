"""Interrupts and carry-over (SPEC §7), with exact resume at every abort point (R-RESUME-10/18).

Each scenario aborts a run at one point, then sends the same next prompt twice: on the live
session, and on a session resumed from a copy of the trace taken right after the abort.  The two
requests must be equal message for message (timestamps included), and the trace must hold no
synthesized record (V-15, INV-17).
"""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import pytest
from enginekit import (
    Env,
    GatedEnvironment,
    assert_requests_paired,
    check_trace,
    collect,
    kinds,
    make_session,
)

from engine import AbortSignal, LLMRequest, RetryPolicy, Session, allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import (
    AbortPayload,
    DataRoot,
    OmniMessage,
    RequestEndPayload,
    TextPayload,
    ToolCallOutputPayload,
)
from eventstore import builders as b
from replay import resume_session

pytestmark = pytest.mark.anyio

TOOLS = [{"name": "t", "description": "test tool"}]
FINAL = [{"text": "ok"}]


async def next_request_live(session: Session, llm: ScriptedLLM, prompt: OmniMessage) -> LLMRequest:
    await collect(session.run([prompt], approve=allow_all))
    return llm.requests[-1]


async def next_request_resumed(
    home: Path, session_id: str, workspace: Path, prompt: OmniMessage, script: Any
) -> LLMRequest:
    llm = ScriptedLLM(script)
    resumed = await resume_session(
        DataRoot(home),
        session_id,
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        compaction=None,
        retry=RetryPolicy(base_ms=1, cap_ms=4),
    )
    async with resumed:
        llm.bind(resumed)
        await collect(resumed.run([prompt], approve=allow_all))
        check_trace(resumed)
    return llm.requests[-1]


def snapshot(env: Env, tmp: Path) -> Path:
    copy = tmp / "copy"
    shutil.copytree(env.home, copy)
    return copy


def assert_same_request(live: LLMRequest, resumed: LLMRequest) -> None:
    assert resumed.messages == live.messages
    assert resumed.new_messages == live.new_messages
    assert resumed.system_prompt == live.system_prompt
    assert resumed.tools == live.tools


def no_synthesized_records(session: Session) -> None:
    """V-15 / R-CARRY-8: no carry-over placeholder or transcript block is ever written."""
    from enginekit import trace_records

    for r in trace_records(session):
        p = r.payload
        if isinstance(p, TextPayload):
            assert not p.text.startswith(("[turn_aborted]", "[turn_retried]"))
        if isinstance(p, ToolCallOutputPayload):
            assert p.output != "[interrupted: process exited before the tool finished]"


async def run_scenario(
    env: Env,
    tmp_path: Path,
    script: list[Any],
    *,
    trigger: Callable[[OmniMessage, AbortSignal, Any], Awaitable[bool] | bool],
    environment: Any = None,
    approve: Any = allow_all,
    retry: RetryPolicy | None = None,
    pre_abort: bool = False,
    signal: AbortSignal | None = None,
) -> tuple[list[OmniMessage], list[OmniMessage], LLMRequest]:
    """Run, abort at the trigger, compare live and resumed next requests; return the stream,
    the live carry-over and the live next request."""
    full = {"responses": [*script, FINAL, FINAL], "tools": TOOLS}
    session, llm = await make_session(env, full, environment=environment, retry=retry)
    signal = signal or AbortSignal()
    if pre_abort:
        signal.abort()
    prompt = b.user_text("continue")
    async with session:
        stream: list[OmniMessage] = []
        async for msg in session.run([b.user_text("go")], approve=approve, signal=signal):
            stream.append(msg)
            fired = trigger(msg, signal, environment)
            if not isinstance(fired, bool):
                await fired
        check_trace(session, stream)
        no_synthesized_records(session)
        carry = session.context.pending
        copy = snapshot(env, tmp_path)
        live = await next_request_live(session, llm, prompt)
        check_trace(session)
    rest = {"responses": full["responses"][len(llm.requests) - 1 :], "tools": TOOLS}
    resumed = await next_request_resumed(copy, session.id, env.workspace, prompt, rest)
    assert_same_request(live, resumed)
    assert_requests_paired(llm.requests)
    return stream, carry, live


def never(msg: OmniMessage, signal: AbortSignal, environment: Any) -> bool:
    return False


def last_is_abort(stream: list[OmniMessage], reason: str = "aborted by user") -> None:
    assert isinstance(stream[-1].payload, AbortPayload), kinds(stream[-3:])
    assert stream[-1].payload.reason == reason


async def test_abort_before_first_request(env: Env, tmp_path: Path) -> None:
    """R-RUN-7: an already-aborted signal: the input becomes the carry-over unchanged."""
    stream, carry, live = await run_scenario(env, tmp_path, [], trigger=never, pre_abort=True)
    assert kinds(stream) == ["tool_list_ready", "abort"]
    last_is_abort(stream)
    assert [m.payload.text for m in carry] == ["go"]  # type: ignore[union-attr]
    assert [m.payload.text for m in live.messages] == ["go", "continue"]  # type: ignore[union-attr]


async def test_abort_mid_stream_is_case_b(env: Env, tmp_path: Path) -> None:
    """R-CARRY-4/5: the LLM honours the signal and returns aborted: one [turn_aborted] block."""
    script = [[{"text": "thinking about it", "chunks": 1}, {"sleep_ms": 60000}, {"text": "never"}]]

    def trigger(msg: OmniMessage, signal: AbortSignal, _: Any) -> bool:
        if isinstance(msg.payload, TextPayload) and not msg.is_partial:
            signal.abort()
        return False

    stream, carry, _ = await run_scenario(env, tmp_path, script, trigger=trigger)
    last_is_abort(stream)
    ends = [m.payload for m in stream if isinstance(m.payload, RequestEndPayload)]
    assert [e.status for e in ends] == ["aborted"]
    assert len(carry) == 1
    assert carry[0].payload.text == (  # type: ignore[union-attr]
        "[turn_aborted]\n  [user_input]go[/user_input]\n  [text]thinking about it[/text]\n"
        "[/turn_aborted]"
    )
    assert carry[0].timestamp == stream[-1].timestamp  # R-PROJ-3a: the abort's timestamp


async def test_abort_while_tools_run_is_case_a(env: Env, tmp_path: Path) -> None:
    """R-CARRY-3: the turn committed; the aborted tool's output (or a placeholder) answers it."""
    gated = GatedEnvironment()
    script = [
        [
            {"tool_call": {"name": "t", "arguments": {}, "id": "a"}},
            {"tool_call": {"name": "t", "arguments": {}, "id": "b"}},
        ]
    ]

    async def trigger(msg: OmniMessage, signal: AbortSignal, environment: Any) -> None:
        p = msg.payload
        if isinstance(p, RequestEndPayload):
            await environment.start_event("a").wait()
            environment.release("b")
        if isinstance(p, ToolCallOutputPayload) and p.tool_call_id == "b" and not msg.is_partial:
            signal.abort()

    stream, carry, _ = await run_scenario(env, tmp_path, script, trigger=trigger, environment=gated)
    last_is_abort(stream)
    assert [(m.payload.tool_call_id, m.payload.output, m.payload.stop_reason) for m in carry] == [  # type: ignore[union-attr]
        ("a", "[interrupted: tool aborted by user]", "aborted"),
        ("b", "out b", "completed"),
    ]


async def test_abort_during_approval_skips_dispatch(env: Env, tmp_path: Path) -> None:
    """R-APPROVE-1: a signal fired during the callback emits nothing for that call; the
    committed call gets the case-A placeholder with the abort's timestamp."""
    script = [[{"tool_call": {"name": "t", "arguments": {}, "id": "a", "result": {"output": "x"}}}]]
    signal = AbortSignal()

    def approve(call: OmniMessage) -> str:
        signal.abort()
        return "allow"

    stream, carry, _ = await run_scenario(
        env, tmp_path, script, trigger=never, approve=approve, signal=signal
    )
    last_is_abort(stream)
    assert "approval_decision" not in kinds(stream)
    assert [(m.payload.output, m.timestamp) for m in carry] == [  # type: ignore[union-attr]
        ("[interrupted: tool aborted by user]", stream[-1].timestamp)
    ]


async def test_abort_during_backoff(env: Env, tmp_path: Path) -> None:
    """R-RETRY-13: the wait ends at once; carry-over is the input plus the [turn_retried]."""
    script = [[{"text": "partial"}, {"fail": {"status": "timeout", "message": "idle"}}]]

    async def abort_in_backoff(signal: AbortSignal) -> bool:
        # The engine is inside its 60 s wait once every other task is blocked (it may still be
        # finishing the request span when the consumer sees the request_end).
        await anyio.wait_all_tasks_blocked()
        signal.abort()
        return False

    def trigger(msg: OmniMessage, signal: AbortSignal, _: Any) -> Awaitable[bool] | bool:
        if isinstance(msg.payload, RequestEndPayload) and msg.payload.retry_in_ms:
            return abort_in_backoff(signal)
        return False

    stream, carry, _ = await run_scenario(
        env, tmp_path, script, trigger=trigger, retry=RetryPolicy(base_ms=60_000)
    )
    last_is_abort(stream, "aborted during reconnect backoff")
    assert [m.payload.text for m in carry] == [  # type: ignore[union-attr]
        "go",
        "[turn_retried]\n  [text]partial[/text]\n[/turn_retried]",
    ]


@pytest.mark.parametrize("closing", [True, False])
async def test_consumer_break_records_abort(env: Env, closing: bool) -> None:
    """R-CARRY-2: leaving the `async for` early behaves like signal.abort() — at once under
    `aclosing`, and when the abandoned generator is finalized otherwise."""
    gated = GatedEnvironment()
    full = {
        "responses": [[{"tool_call": {"name": "t", "arguments": {}, "id": "a"}}], FINAL],
        "tools": TOOLS,
    }
    session, _ = await make_session(env, full, environment=gated)
    async with session:
        stream: list[OmniMessage] = []
        if closing:
            async with aclosing(session.run([b.user_text("go")], approve=allow_all)) as run:
                async for msg in run:
                    stream.append(msg)
                    if kinds([msg]) == ["approval_decision"]:
                        break
            assert not session.running
        else:
            async for msg in session.run([b.user_text("go")], approve=allow_all):
                stream.append(msg)
                if kinds([msg]) == ["approval_decision"]:
                    break
            with anyio.fail_after(10):
                while session.running:  # the event loop finalizes the dropped generator
                    await anyio.sleep(0.001)
        records = check_trace(session, stream, whole_stream=False)
        assert isinstance(records[-1].payload, AbortPayload)
        carry = session.context.pending
    assert [m.payload.tool_call_id for m in carry] == ["a"]  # type: ignore[union-attr]


async def test_outside_cancellation_is_recorded_then_reraised(env: Env) -> None:
    """R-CARRY-2: a cancelled consumer records the abort; the cancellation propagates."""
    gated = GatedEnvironment()
    full = {
        "responses": [[{"tool_call": {"name": "t", "arguments": {}, "id": "a"}}], FINAL],
        "tools": TOOLS,
    }
    session, _ = await make_session(env, full, environment=gated)
    async with session:
        with anyio.CancelScope() as scope:
            async for msg in session.run([b.user_text("go")], approve=allow_all):
                if msg.payload.__struct_config__.tag == "approval_decision":  # type: ignore[union-attr]
                    scope.cancel()
        assert scope.cancelled_caught
        records = check_trace(session)
        assert isinstance(records[-1].payload, AbortPayload)


async def test_auth_ends_run_case_b(env: Env, tmp_path: Path) -> None:
    """R-RETRY-14: auth stops at once; no retry_in_ms; llm request error reason."""
    script = [[{"text": "hm"}, {"fail": {"status": "auth", "message": "bad key"}}]]
    stream, carry, _ = await run_scenario(env, tmp_path, script, trigger=never)
    last_is_abort(stream, "llm request error: bad key")
    end = next(m.payload for m in stream if isinstance(m.payload, RequestEndPayload))
    assert (end.status, end.attempt, end.retry_in_ms, end.error_message) == (
        "auth",
        1,
        None,
        "bad key",
    )
    assert [m.payload.text for m in carry] == [  # type: ignore[union-attr]
        "[turn_aborted]\n  [user_input]go[/user_input]\n  [text]hm[/text]\n[/turn_aborted]"
    ]


async def test_retries_then_exhaustion(env: Env, tmp_path: Path) -> None:
    """R-RETRY-9/10/11: stamps, one growing [turn_retried] block, exhaustion reason."""
    fail = {"fail": {"status": "timeout", "message": "idle"}}
    script = [[{"text": "one"}, fail], [{"text": "two"}, fail], [{"thinking": "three"}, fail]]
    retry = RetryPolicy(max_reconnects=2, base_ms=1, cap_ms=1)
    stream, carry, _ = await run_scenario(env, tmp_path, script, trigger=never, retry=retry)
    last_is_abort(stream, "reconnect failed after 2 retries")
    ends = [m.payload for m in stream if isinstance(m.payload, RequestEndPayload)]
    assert [(e.attempt, e.retry_in_ms) for e in ends] == [(1, 1), (2, 1), (3, None)]
    block = "[turn_retried]\n  [text]one[/text]\n  [text]two[/text]\n  [thinking]three[/thinking]\n[/turn_retried]"
    assert [m.payload.text for m in carry] == ["go", block]  # type: ignore[union-attr]


async def test_retry_input_carries_all_failed_attempts(env: Env) -> None:
    """INV-14: every retry re-sends the first attempt's messages plus one [turn_retried]."""
    fail = {"fail": {"status": "malformed"}}
    script = [[{"text": "a"}, fail], [{"text": "b"}, fail], [{"text": "done"}]]
    session, llm = await make_session(env, script)
    async with session:
        stream = await collect(session.run([b.user_text("go")]))
        check_trace(session, stream)
    first, second, third = llm.requests
    assert second.messages[:-1] == first.messages == third.messages[:-1]
    assert second.messages[-1].payload.text == "[turn_retried]\n  [text]a[/text]\n[/turn_retried]"  # type: ignore[union-attr]
    assert third.messages[-1].payload.text == (  # type: ignore[union-attr]
        "[turn_retried]\n  [text]a[/text]\n  [text]b[/text]\n[/turn_retried]"
    )
    assert third.new_messages == 2
    ends = [m.payload for m in stream if isinstance(m.payload, RequestEndPayload)]
    assert [(e.status, e.attempt, e.retry_in_ms) for e in ends] == [
        ("malformed", 1, 1),
        ("malformed", 2, 2),
        ("completed", 3, None),
    ]


def test_default_ladder_arithmetic() -> None:
    """R-RETRY-3/8: 250 ms doubling, capped at 30 s."""
    policy = RetryPolicy()
    assert [policy.delay_ms(n) for n in range(1, 10)] == [
        250,
        500,
        1000,
        2000,
        4000,
        8000,
        16000,
        30000,
        30000,
    ]
    assert RetryPolicy(base_ms=40000).delay_ms(1) == 30000


async def test_skip_reconnect_wait(env: Env) -> None:
    """R-RETRY-12: skipping ends a long backoff without changing attempt numbering."""
    script = [[{"fail": {"status": "timeout"}}], [{"text": "ok"}]]
    session, _ = await make_session(env, script, retry=RetryPolicy(base_ms=600_000))
    assert session.skip_reconnect_wait() is False
    async with session:
        stream: list[OmniMessage] = []
        async for msg in session.run([b.user_text("go")]):
            stream.append(msg)
            if isinstance(msg.payload, RequestEndPayload) and msg.payload.retry_in_ms:
                with anyio.fail_after(10):
                    while not session.skip_reconnect_wait():
                        await anyio.sleep(0)
        check_trace(session, stream)
    ends = [m.payload for m in stream if isinstance(m.payload, RequestEndPayload)]
    assert [(e.status, e.attempt) for e in ends] == [("timeout", 1), ("completed", 2)]


async def test_permanent_failure_is_case_b(env: Env, tmp_path: Path) -> None:
    """R-RETRY-14: a permanent `failed` ends the run like auth, status kept as failed."""
    script = [[{"fail": {"status": "failed", "message": "400 bad request", "permanent": True}}]]
    stream, carry, _ = await run_scenario(env, tmp_path, script, trigger=never)
    last_is_abort(stream, "llm request error: 400 bad request")
    end = next(m.payload for m in stream if isinstance(m.payload, RequestEndPayload))
    assert (end.status, end.retry_in_ms) == ("failed", None)
    assert [m.payload.text for m in carry] == [  # type: ignore[union-attr]
        "[turn_aborted]\n  [user_input]go[/user_input]\n[/turn_aborted]"
    ]


async def test_repeated_pre_request_aborts_accumulate(env: Env) -> None:
    """R-RUN-7: the raw inputs accumulate in order."""
    session, llm = await make_session(env, {"responses": [FINAL], "tools": TOOLS})
    dead = AbortSignal()
    dead.abort()
    async with session:
        await collect(session.run([b.user_text("go")], signal=dead))
        await collect(session.run([b.user_text("next")], signal=dead))
        await collect(session.run([b.user_text("now")]))
        check_trace(session)
    assert [m.payload.text for m in llm.requests[0].messages] == ["go", "next", "now"]  # type: ignore[union-attr]


async def test_abort_from_another_thread(env: Env) -> None:
    """API.md: AbortSignal fires from any thread."""
    script = {"responses": [[{"sleep_ms": 600000}, {"text": "never"}], FINAL], "tools": TOOLS}
    session, _ = await make_session(env, script)
    signal = AbortSignal()
    async with session:
        stream: list[OmniMessage] = []
        async for msg in session.run([b.user_text("go")], signal=signal):
            stream.append(msg)
            if msg.payload.__struct_config__.tag == "request_begin":  # type: ignore[union-attr]
                await anyio.to_thread.run_sync(signal.abort)
        check_trace(session, stream)
    last_is_abort(stream)


async def test_auth_after_retries_merges_one_block(env: Env, tmp_path: Path) -> None:
    """R-CARRY-6: an abort after failed retries gives ONE [turn_aborted] block holding the
    former [turn_retried] lines and no [turn_retried] tag."""
    script = [
        [{"text": "first"}, {"fail": {"status": "timeout", "message": "t"}}],
        [{"text": "second"}, {"fail": {"status": "auth", "message": "expired"}}],
    ]
    stream, carry, _ = await run_scenario(env, tmp_path, script, trigger=never)
    last_is_abort(stream, "llm request error: expired")
    assert [m.payload.text for m in carry] == [  # type: ignore[union-attr]
        "[turn_aborted]\n  [user_input]go[/user_input]\n  [text]first[/text]\n"
        "  [text]second[/text]\n[/turn_aborted]"
    ]


async def test_retry_after_lengthens_the_wait(env: Env) -> None:
    """A provider's Retry-After (LLMOutcome.retry_after_s) lengthens the ladder step, capped
    at cap_ms; the stamped retry_in_ms is the wait actually taken (R-RETRY-8)."""
    script = [
        [{"fail": {"status": "timeout", "retry_after_s": 0.02}}],
        [{"fail": {"status": "timeout", "retry_after_s": 99}}],
        [{"text": "ok"}],
    ]
    session, _ = await make_session(env, script, retry=RetryPolicy(base_ms=1, cap_ms=30))
    async with session:
        stream = await collect(session.run([b.user_text("go")]))
        check_trace(session, stream)
    ends = [m.payload for m in stream if isinstance(m.payload, RequestEndPayload)]
    assert [e.retry_in_ms for e in ends] == [20, 30, None]
