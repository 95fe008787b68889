"""The engine-enforced request timeout (issue: reconnect) and session titles (SPEC §12)."""

from __future__ import annotations

import pytest
from enginekit import Env, check_trace, collect, make_session, trace_records

from engine import RetryPolicy
from engine._title import sanitize_title
from eventstore import RequestEndPayload
from eventstore import builders as b

pytestmark = pytest.mark.anyio


async def test_request_timeout_is_enforced_and_retried(env: Env) -> None:
    """A model that goes quiet longer than request_timeout_ms ends the attempt as `timeout`;
    the open segment is closed (R-STREAM-4) and the retry transcribes it (R-RETRY-11)."""
    script = [[{"text": "slow"}, {"sleep_ms": 600_000}, {"text": "never"}], [{"text": "fast"}]]
    retry = RetryPolicy(base_ms=1, cap_ms=1, request_timeout_ms=50)
    session, llm = await make_session(env, script, retry=retry)
    async with session:
        stream = await collect(session.run([b.user_text("go")]))
        check_trace(session, stream)
    ends = [m.payload for m in stream if isinstance(m.payload, RequestEndPayload)]
    assert [(e.status, e.attempt, e.retry_in_ms) for e in ends] == [
        ("timeout", 1, 1),
        ("completed", 2, None),
    ]
    assert ends[0].error_message == ("request timed out: no response from the model for 50 ms")
    assert llm.requests[1].messages[-1].payload.text == (  # type: ignore[union-attr]
        "[turn_retried]\n  [text]slow[/text]\n[/turn_retried]"
    )


async def test_generate_title_is_out_of_band(env: Env) -> None:
    """R-TITLE-1/2/4: one request, no tools, no system prompt, nothing recorded."""
    script = [
        [{"text": "Sure, here is the plan."}],
        [{"text": '"Fix the Login Bug!"'}, {"usage": {"cache_write": 7, "output": 3}}],
    ]
    session, llm = await make_session(env, script)
    async with session:
        await collect(session.run([b.user_text("please fix the login bug")]))
        before = trace_records(session)
        state = session.state
        title = await session.generate_title()
        assert trace_records(session) == before
        assert session.state == state
    assert title == "Fix the Login Bug"
    req = llm.requests[1]
    assert (req.system_prompt, req.tools, req.new_messages, req.thinking_level) == (
        "",
        [],
        1,
        "none",
    )
    prompt = req.messages[0].payload.text  # type: ignore[union-attr]
    assert prompt.endswith(
        "[User]\nplease fix the login bug\n\n[Assistant]\nSure, here is the plan."
    )
    assert session.title_usage is not None and session.title_usage.total == 10


async def test_title_none_without_user_material(env: Env) -> None:
    """R-TITLE-3: no user text, no request."""
    session, llm = await make_session(env, [])
    async with session:
        assert await session.generate_title() is None
    assert llm.requests == []


async def test_title_none_when_request_fails(env: Env) -> None:
    script = [[{"text": "ok"}], [{"fail": {"status": "timeout"}}]]
    session, _ = await make_session(env, script)
    async with session:
        await collect(session.run([b.user_text("hello")]))
        assert await session.generate_title() is None


@pytest.mark.parametrize(
    ("raw", "title"),
    [
        ("  “Quoted title.”  ", "Quoted title"),
        ("[Bracketed]!!", "Bracketed"),
        ("a   b\n c", "a b c"),
        ("x" * 40, "x" * 30),
        ("[use_skills]hidden[/use_skills]Real", "Real"),
        ("...", ""),
    ],
)
def test_sanitize_title(raw: str, title: str) -> None:
    """R-TITLE-3 sanitizing."""
    assert sanitize_title(raw) == title
