"""The HTTP providers driving a whole task through the engine (SPEC §5, §6, §7, INV-18/24/25).

A real server on 127.0.0.1 answers: first a 500 (retried), then a response with two tool calls
(run by a scripted environment), then the final answer.  The trace must validate and rebuild
into the live projections, and the retry must re-send the first attempt's body unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import providerkit as K
import pytest
from enginekit import Env, check_trace, collect, complete, trace_records

from engine import AbortSignal, RetryPolicy, Session, allow_all
from engine.llm import Anthropic, OpenAICompatible, ScriptedEnvironment
from eventstore import (
    AbortPayload,
    RequestEndPayload,
    TextPayload,
    ToolCallOutputPayload,
    ToolCallPayload,
)
from eventstore import builders as b

pytestmark = pytest.mark.anyio
KEY = "sk-e2e-Kx93LmQ0vR"
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]

CASES: dict[str, dict[str, Any]] = {
    "openai": {
        "calls": ["call_Qx7a", "call_Rb9c"],
        "tool_reply": "openai_parallel_tools.sse",
        "final_reply": "openai_text.sse",
        "final_text": "Hello, world!",
        "stalled": (4, "Hello, wor"),
        "error": {"error": {"message": "The server had an error while processing your request."}},
        "error_message": "openai: HTTP 500: The server had an error while processing your request.",
    },
    "anthropic": {
        "calls": ["toolu_01A09q90qw90lq917835lq9", "toolu_01B7hQ2Lm3"],
        "tool_reply": "anthropic_thinking_tools.sse",
        "final_reply": "anthropic_redacted.sse",
        "final_text": "Done.",
        "stalled": (5, "Done."),
        "error": {
            "type": "error",
            "error": {"type": "api_error", "message": "Internal server error"},
        },
        "error_message": "anthropic: HTTP 500: api_error: Internal server error",
    },
}


@pytest.fixture
def server() -> Iterator[Any]:
    with K.SSEServer() as srv:
        yield srv


def make_llm(provider: str, server: Any) -> Any:
    if provider == "openai":
        return OpenAICompatible(model="gpt-4o", base_url=f"{server.url}/v1", api_key=KEY)
    return Anthropic(model="claude-sonnet-4-5", api_key=KEY, base_url=server.url)


def environment(calls: list[str]) -> ScriptedEnvironment:
    return ScriptedEnvironment(
        {
            "tools": TOOLS,
            "responses": [
                [
                    {
                        "tool_call": {
                            "name": "read_file",
                            "arguments": {"path": f"{n}.txt"},
                            "id": cid,
                            "result": {"output": f"body of {n}.txt"},
                        }
                    }
                    for n, cid in zip("ab", calls, strict=True)
                ]
            ],
        }
    )


async def new_session(provider: str, server: Any, env: Env, **kw: Any) -> tuple[Session, Any]:
    llm = make_llm(provider, server)
    session = await Session.create(
        llm=llm,
        environment=environment(CASES[provider]["calls"]),
        root=env.root,
        workspace=env.workspace,
        system_prompt="You are careful.",
        retry=RetryPolicy(base_ms=1, cap_ms=4),
        **kw,
    )
    return session, llm


def _ends(stream: list[Any]) -> list[tuple[str, int | None, int | None, str | None]]:
    return [
        (p.status, p.attempt, p.retry_in_ms, p.error_message)
        for p in (m.payload for m in stream)
        if isinstance(p, RequestEndPayload)
    ]


def _key_free(session: Session) -> None:
    for path in session._root.trace_files(session.id):
        assert KEY.encode() not in path.read_bytes()


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_full_task_with_a_retry_after_500(provider: str, server: Any, env: Env) -> None:
    """Tool calls, tool results, final answer, one retry after a 500 (R-RETRY-4/7/8), a trace
    the validator accepts, live projections equal to rebuilt ones (check_trace)."""
    case = CASES[provider]
    server.queue(
        K.error(500, case["error"]),
        K.sse(K.recording(case["tool_reply"])),
        K.sse(K.recording(case["final_reply"])),
    )
    session, llm = await new_session(provider, server, env)
    async with session, llm:
        stream = await collect(session.run([b.user_text("Read a and b.")], approve=allow_all))
        records = check_trace(session, stream)
    assert _ends(stream) == [
        ("timeout", 1, 1, case["error_message"]),
        ("completed", 2, None, None),
        ("completed", None, None, None),
    ]
    calls = [m.payload for m in complete(records) if isinstance(m.payload, ToolCallPayload)]
    outputs = [m.payload for m in records if isinstance(m.payload, ToolCallOutputPayload)]
    assert [c.tool_call_id for c in calls] == case["calls"]
    assert [(o.tool_call_id, o.output) for o in outputs] == [
        (case["calls"][0], "body of a.txt"),
        (case["calls"][1], "body of b.txt"),
    ]
    final = [m.payload for m in records if isinstance(m.payload, TextPayload)][-1]
    assert (final.role, final.text) == ("assistant", case["final_text"])
    assert records[0].payload.provider == provider  # type: ignore[union-attr]

    first, retry, after_tools = server.requests
    assert first.body == retry.body  # nothing was transcribed, so the retry is identical
    sent = after_tools.json["messages"]
    if provider == "openai":
        assert [c["id"] for c in sent[-3]["tool_calls"]] == case["calls"]
        assert [(m["role"], m["tool_call_id"], m["content"]) for m in sent[-2:]] == [
            ("tool", case["calls"][0], "body of a.txt"),
            ("tool", case["calls"][1], "body of b.txt"),
        ]
    else:
        assistant, results = sent[-2], sent[-1]
        assert assistant["content"][0]["type"] == "thinking"
        assert assistant["content"][0]["signature"] == "EqQBCkgIBxABGAIqQKz+/3rZ0Q==AbC/def+ghi="
        assert [c["id"] for c in assistant["content"] if c["type"] == "tool_use"] == case["calls"]
        assert [r["tool_use_id"] for r in results["content"]] == case["calls"]
    _key_free(session)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_auth_failure_stops_the_run(provider: str, server: Any, env: Env) -> None:
    """R-RETRY-14: 401 → request_end auth, no retry, abort `llm request error: …`; the key the
    server echoed is redacted before it reaches the trace."""
    server.queue(K.error(401, {"error": {"message": f"Incorrect API key provided: {KEY}"}}))
    session, llm = await new_session(provider, server, env)
    async with session, llm:
        stream = await collect(session.run([b.user_text("hi")], approve=allow_all))
        check_trace(session, stream)
    message = f"{provider}: HTTP 401: Incorrect API key provided: [redacted]"
    assert _ends(stream) == [("auth", 1, None, message)]
    (abort,) = [m.payload for m in stream if isinstance(m.payload, AbortPayload)]
    assert abort.reason == f"llm request error: {message}"
    assert len(server.requests) == 1
    _key_free(session)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_abort_during_a_hanging_stream(provider: str, server: Any, env: Env) -> None:
    """R-CARRY-1, R-STREAM-4: the user aborts while the provider stalls mid-answer; the run
    ends promptly with the partial answer recorded `aborted` and a valid trace."""
    body = K.recording(CASES[provider]["final_reply"])
    events, partial = CASES[provider]["stalled"]
    server.queue(K.sse(K.split_events(body)[:events], end="hang"))
    session, llm = await new_session(provider, server, env)
    signal = AbortSignal()

    async def abort_when_stalled() -> None:
        await anyio.to_thread.run_sync(server.hung.wait)
        await anyio.wait_all_tasks_blocked()
        signal.abort()

    async with session, llm, anyio.create_task_group() as tg:
        tg.start_soon(abort_when_stalled)
        with anyio.fail_after(10):
            stream = await collect(
                session.run([b.user_text("hi")], approve=allow_all, signal=signal)
            )
        check_trace(session, stream)
    assert _ends(stream) == [("aborted", 1, None, None)]
    assert isinstance(stream[-1].payload, AbortPayload)
    assert stream[-1].payload.reason == "aborted by user"
    last = [
        m.payload
        for m in trace_records(session)
        if m.type == "model_msg" and getattr(m.payload, "role", None) == "assistant"
    ][-1]
    assert isinstance(last, TextPayload)
    assert (last.text, last.stop_reason) == (partial, "aborted")
