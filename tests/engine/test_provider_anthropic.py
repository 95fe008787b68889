"""Anthropic (Messages streaming) against a real HTTP server on 127.0.0.1 (SPEC §2.6, §3)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import providerkit as K
import pytest

from engine import AbortSignal
from engine.llm import Anthropic
from eventstore import (
    TextPayload,
    ThinkingPayload,
    TokenCounts,
    TokenUsagePayload,
    ToolCallPayload,
    ToolDefinition,
)
from eventstore import builders as b

pytestmark = pytest.mark.anyio
KEY = "sk-ant-api03-Zq8RfT2uVw"
SIGNATURE = "EqQBCkgIBxABGAIqQKz+/3rZ0Q==AbC/def+ghi="
REDACTED = (
    "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ"
    "5sQ7vB5URj2pabLBZeg=="
)


@pytest.fixture
def server() -> Iterator[Any]:
    with K.SSEServer() as srv:
        yield srv


def llm_for(server: Any, **kw: Any) -> Anthropic:
    return Anthropic(model="claude-sonnet-4-5", api_key=KEY, base_url=server.url, **kw)


async def run(server: Any, *replies: Any, request: Any = None, **kw: Any) -> tuple[list[Any], Any]:
    server.queue(*replies)
    async with llm_for(server, **kw) as llm:
        return await K.drain(llm.stream(request or K.request()))


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()


def _events(name: str) -> list[bytes]:
    return K.split_events(K.recording(name))


# --------------------------------------------------------------------------- success paths


@pytest.mark.parametrize("pieces", ["events", "5 bytes"])
async def test_thinking_text_and_parallel_tool_use(server: Any, pieces: str) -> None:
    """thinking_delta + signature_delta → thinking with fidelity.signature verbatim; text;
    input_json_delta fragments → tool calls; usage from message_start and message_delta."""
    body = K.recording("anthropic_thinking_tools.sse")
    chunks = K.split_events(body) if pieces == "events" else K.split_every(body, 5)
    messages, outcome = await run(server, K.sse(chunks))
    assert (outcome.status, outcome.message) == ("completed", None)
    assert K.tags(messages) == [
        "partial_thinking:start",
        "partial_thinking:delta",
        "partial_thinking:delta",
        "partial_thinking:stop",
        "thinking",
        "partial_text:start",
        "partial_text:delta",
        "partial_text:delta",
        "partial_text:stop",
        "text",
        "partial_tool_call:start",
        "partial_tool_call:delta",
        "partial_tool_call:delta",
        "partial_tool_call:stop",
        "tool_call",
        "partial_tool_call:start",
        "partial_tool_call:delta",
        "partial_tool_call:delta",
        "partial_tool_call:stop",
        "tool_call",
        "token_usage",
    ]
    think, text, first, second, usage = K.completes(messages)
    assert isinstance(think, ThinkingPayload) and think.thinking == "I need both files."
    assert think.fidelity == {"signature": SIGNATURE}
    assert isinstance(text, TextPayload) and text.text == "Let me look." and text.fidelity is None
    assert isinstance(first, ToolCallPayload)
    assert (first.name, first.tool_call_id, first.arguments) == (
        "read_file",
        "toolu_01A09q90qw90lq917835lq9",
        '{"path": "a.txt"}',
    )
    assert (second.tool_call_id, second.arguments) == ("toolu_01B7hQ2Lm3", '{"path": "b.txt"}')
    assert isinstance(usage, TokenUsagePayload)
    # cache_read = cache_read_input_tokens; cache_write = input + cache_creation (R-MSG-17)
    assert usage.request == TokenCounts(2048, 412 + 1024, 89, 2048 + 1436 + 89)
    (sent,) = server.requests
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers


async def test_redacted_thinking_is_kept(server: Any) -> None:
    messages, outcome = await run(server, K.sse(K.recording("anthropic_redacted.sse")))
    assert outcome.status == "completed"
    think, text, usage = K.completes(messages)
    assert think.thinking == "" and think.fidelity == {"redacted_thinking": REDACTED}
    assert text.text == "Done."
    assert usage.request == TokenCounts(0, 30, 12, 42)


async def test_max_tokens_completes_and_marks_the_last_block(server: Any) -> None:
    """stop_reason max_tokens: the request still completes; the truncated last block carries
    fidelity.stop_reason (StopReason has no "length")."""
    messages, outcome = await run(server, K.sse(K.recording("anthropic_max_tokens.sse")))
    assert (outcome.status, outcome.message) == ("completed", None)
    text, usage = K.completes(messages)
    assert (text.text, text.stop_reason) == ("Once upon a time there", "completed")
    assert text.fidelity == {"stop_reason": "max_tokens"}
    assert usage.request == TokenCounts(0, 25, 16, 41)


async def test_tool_use_cut_by_max_tokens_is_malformed(server: Any) -> None:
    events = _events("anthropic_thinking_tools.sse")
    cut = [
        e
        for e in events
        if b"b.txt" not in e
        and b"toolu_01B7" not in e
        and b'index":3' not in e
        and b"message_delta" not in e
    ]
    cut.insert(
        -1,
        _event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 3,
                "content_block": {
                    "type": "tool_use",
                    "id": "toolu_cut",
                    "name": "write_file",
                    "input": {},
                },
            },
        ),
    )
    cut.insert(
        -1,
        _event(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 3,
                "delta": {
                    "type": "input_json_delta",
                    "partial_json": '{"path": "x", "content": "ab',
                },
            },
        ),
    )
    cut.insert(-1, _event("content_block_stop", {"type": "content_block_stop", "index": 3}))
    messages, outcome = await run(server, K.sse(cut))
    assert outcome.status == "malformed"
    assert outcome.message.startswith(
        "anthropic: tool call write_file (toolu_cut) arguments are not valid JSON ("
    )
    calls = [p for p in K.completes(messages) if isinstance(p, ToolCallPayload)]
    assert [(c.tool_call_id, c.stop_reason) for c in calls] == [
        ("toolu_01A09q90qw90lq917835lq9", "completed"),
        ("toolu_cut", "malformed"),
    ]


async def test_unknown_event_block_and_delta_types_are_skipped(server: Any) -> None:
    """Forward compatibility: new event types, server-tool blocks and citation deltas have no
    OmniMessage form and are skipped; the known content still arrives."""
    events = _events("anthropic_redacted.sse")
    extra = [
        _event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 2,
                "content_block": {
                    "type": "server_tool_use",
                    "id": "srvtoolu_1",
                    "name": "web_search",
                    "input": {},
                },
            },
        ),
        _event(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": '{"q": "x"}'},
            },
        ),
        _event("content_block_stop", {"type": "content_block_stop", "index": 2}),
        _event("future_event", {"type": "future_event", "anything": [1, 2]}),
    ]
    citation = _event(
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "citations_delta", "citation": {"type": "char_location"}},
        },
    )
    at = next(i for i, e in enumerate(events) if b'"text":"Done."' in e)
    body = [*events[: at + 1], citation, *events[at + 1 : -2], *extra, *events[-2:]]
    messages, outcome = await run(server, K.sse(body))
    assert outcome.status == "completed"
    assert [type(p).__name__ for p in K.completes(messages)] == [
        "ThinkingPayload",
        "TextPayload",
        "TokenUsagePayload",
    ]


# --------------------------------------------------------------------------- failures

AUTH = {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}


@pytest.mark.parametrize(
    ("reply", "status", "permanent", "message", "retry_after"),
    [
        pytest.param(
            K.error(401, AUTH),
            "auth",
            False,
            "anthropic: HTTP 401: authentication_error: invalid x-api-key",
            None,
            id="401",
        ),
        pytest.param(
            K.error(
                403,
                {
                    "type": "error",
                    "error": {
                        "type": "permission_error",
                        "message": "Your API key does not have permission "
                        "to use the specified resource.",
                    },
                },
            ),
            "failed",
            False,
            "anthropic: HTTP 403: permission_error: Your API key does not have permission to "
            "use the specified resource.",
            None,
            id="403",
        ),
        pytest.param(
            K.error(
                400,
                {
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": "messages: text content blocks must be non-empty",
                    },
                },
            ),
            "failed",
            True,
            "anthropic: HTTP 400: invalid_request_error: "
            "messages: text content blocks must be non-empty",
            None,
            id="400",
        ),
        pytest.param(
            K.error(
                429,
                {
                    "type": "error",
                    "error": {
                        "type": "rate_limit_error",
                        "message": "Number of request tokens has exceeded "
                        "your per-minute rate limit",
                    },
                },
                {"retry-after": "12"},
            ),
            "timeout",
            False,
            "anthropic: HTTP 429: rate_limit_error: Number of request tokens has exceeded "
            "your per-minute rate limit",
            12.0,
            id="429",
        ),
        pytest.param(
            K.error(
                500,
                {
                    "type": "error",
                    "error": {"type": "api_error", "message": "Internal server error"},
                },
            ),
            "timeout",
            False,
            "anthropic: HTTP 500: api_error: Internal server error",
            None,
            id="500",
        ),
        pytest.param(
            K.error(
                529,
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            ),
            "timeout",
            False,
            "anthropic: HTTP 529: overloaded_error: Overloaded",
            None,
            id="529",
        ),
    ],
)
async def test_http_failures(
    server: Any,
    reply: Any,
    status: str,
    permanent: bool,
    message: str,
    retry_after: float | None,
) -> None:
    messages, outcome = await run(server, reply)
    assert messages == []
    assert (outcome.status, outcome.permanent, outcome.message, outcome.retry_after_s) == (
        status,
        permanent,
        message,
        retry_after,
    )


async def test_event_error_mid_stream(server: Any) -> None:
    """`event: error` (overloaded) ends the request `timeout` with the provider's text; the
    open text closes with that stop_reason; no usage."""
    messages, outcome = await run(server, K.sse(K.recording("anthropic_error.sse")))
    assert (outcome.status, outcome.message, outcome.permanent) == (
        "timeout",
        "anthropic: stream error: overloaded_error: Overloaded",
        False,
    )
    assert K.tags(messages) == [
        "partial_text:start",
        "partial_text:delta",
        "partial_text:stop",
        "text",
    ]
    (text,) = K.completes(messages)
    assert (text.text, text.stop_reason) == ("Partial", "timeout")


@pytest.mark.parametrize(
    ("tail", "end", "status", "message"),
    [
        pytest.param(
            [],
            "cut",
            "timeout",
            "anthropic: connection lost: peer closed connection without sending "
            "complete message body (incomplete chunked read)",
            id="cut",
        ),
        pytest.param(
            [],
            "done",
            "timeout",
            "anthropic: stream ended before message_stop",
            id="no-message-stop",
        ),
        pytest.param(
            [b'event: content_block_delta\ndata: {"type": "content_bl\n\n'],
            "done",
            "malformed",
            'anthropic: malformed stream: invalid JSON: {"type": "content_bl',
            id="garbage",
        ),
        pytest.param(
            [
                _event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": "zero", "delta": {}},
                )
            ],
            "done",
            "malformed",
            "anthropic: malformed stream: unexpected event shape (Expected `int`, got "
            '`str` - at `$.index`): {"type": "content_block_delta", "index": '
            '"zero", "delta": {}}',
            id="wrong-shape",
        ),
    ],
)
async def test_stream_failures_close_the_open_block(
    server: Any, tail: list[bytes], end: str, status: str, message: str
) -> None:
    head = _events("anthropic_error.sse")[:3]  # message_start, block start, one delta
    messages, outcome = await run(server, K.sse(head + tail, end=end))
    assert (outcome.status, outcome.message) == (status, message)
    (text,) = K.completes(messages)
    assert (text.text, text.stop_reason) == ("Partial", status)
    assert not any(isinstance(p, TokenUsagePayload) for p in K.completes(messages))


async def test_connection_reset_mid_stream(server: Any) -> None:
    head = _events("anthropic_error.sse")[:3]
    messages, outcome = await run(server, K.sse(head, end="reset"))
    assert outcome.status == "timeout"
    assert outcome.message.startswith("anthropic: connection lost: ")
    (text,) = K.completes(messages)
    assert text.stop_reason == "timeout"


async def test_abort_mid_stream(server: Any) -> None:
    signal = AbortSignal()
    got_delta = anyio.Event()

    def on(msg: Any) -> None:
        if msg.is_partial and msg.payload.event_type == "delta":
            got_delta.set()

    async def abort_while_reading() -> None:
        await got_delta.wait()
        await anyio.to_thread.run_sync(server.hung.wait)
        await anyio.wait_all_tasks_blocked()
        signal.abort()

    server.queue(K.sse(_events("anthropic_thinking_tools.sse")[:5], end="hang"))
    async with llm_for(server) as llm, anyio.create_task_group() as tg:
        tg.start_soon(abort_while_reading)
        with anyio.fail_after(10):
            messages, outcome = await K.drain(llm.stream(K.request(signal=signal)), on=on)
    assert outcome.status == "aborted"
    (think,) = K.completes(messages)
    assert (think.thinking, think.stop_reason, think.fidelity) == (
        "I need both files.",
        "aborted",
        None,
    )


# --------------------------------------------------------------------------- request shape

READ_FILE = ToolDefinition(
    name="read_file",
    description="Read a file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}},
)
PNG = "data:image/png;base64,iVBORw0KGgo="


def _context() -> list[Any]:
    return [
        b.user_text("Look at this."),
        b.image_url(PNG),
        b.image_url("https://example.com/cat.png"),
        b.thinking("I need both files.", fidelity={"signature": SIGNATURE}),
        b.thinking("", fidelity={"redacted_thinking": REDACTED}),
        b.thinking("from another provider", fidelity={"reasoning_field": "reasoning"}),
        b.assistant_text("Let me look."),
        b.tool_call("read_file", {"path": "a.txt"}, "toolu_A"),
        b.tool_call("read_file", {"path": "b.txt"}, "toolu_B#2"),
        b.tool_call_output("toolu_A", "A", images=[PNG]),
        b.user_text("[user_steering]\nquick\n[/user_steering]", sender="harness"),
        b.tool_call_output("toolu_B#2", "denied", stop_reason="aborted"),
    ]


async def test_request_body_for_tool_pairs_images_and_signed_thinking(server: Any) -> None:
    """Messages shape: thinking sent back with its signature byte for byte, redacted thinking
    as its block, unsigned thinking dropped, tool_use/tool_result paired by id (suffix
    stripped, results first in their user message), images as blocks, cache breakpoints on the
    system prompt and the last block, a thinking budget for the level."""
    request = K.request(*_context(), tools=[READ_FILE], thinking_level="medium")
    await run(server, K.sse(K.recording("anthropic_redacted.sse")), request=request)
    sent = server.requests[0]
    assert sent.json == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 8192 + 8192,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look at this."},
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/png",
                            "data": "iVBORw0KGgo=",
                        },
                    },
                    {
                        "type": "image",
                        "source": {"type": "url", "url": "https://example.com/cat.png"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "I need both files.", "signature": SIGNATURE},
                    {"type": "redacted_thinking", "data": REDACTED},
                    {"type": "text", "text": "Let me look."},
                    {
                        "type": "tool_use",
                        "id": "toolu_A",
                        "name": "read_file",
                        "input": {"path": "a.txt"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_B",
                        "name": "read_file",
                        "input": {"path": "b.txt"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_A",
                        "content": [
                            {"type": "text", "text": "A"},
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": "iVBORw0KGgo=",
                                },
                            },
                        ],
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_B",
                        "content": "denied",
                        "is_error": True,
                    },
                    {
                        "type": "text",
                        "text": "[user_steering]\nquick\n[/user_steering]",
                        "cache_control": {"type": "ephemeral"},
                    },
                ],
            },
        ],
        "stream": True,
        "system": [
            {"type": "text", "text": "You are careful.", "cache_control": {"type": "ephemeral"}}
        ],
        "tools": [
            {
                "name": "read_file",
                "description": "Read a file.",
                "input_schema": READ_FILE.parameters,
            }
        ],
        "thinking": {"type": "enabled", "budget_tokens": 8192},
    }
    assert f'"signature":"{SIGNATURE}"'.encode() in sent.body  # byte for byte on the wire


async def test_signature_round_trips_from_stream_to_next_request(server: Any) -> None:
    """What the stream gave is what the next request sends back, unchanged."""
    messages, _ = await run(server, K.sse(K.recording("anthropic_thinking_tools.sse")))
    history = [
        b.user_text("go"),
        *(
            m
            for m in messages
            if not m.is_partial and m.payload.__struct_config__.tag != "token_usage"
        ),
    ]
    history += [
        b.tool_call_output("toolu_01A09q90qw90lq917835lq9", "A"),
        b.tool_call_output("toolu_01B7hQ2Lm3", "B"),
    ]
    await run(
        server,
        K.sse(K.recording("anthropic_redacted.sse")),
        request=K.request(*history),
        prompt_cache=False,
    )
    sent = server.requests[1].json
    assert sent["system"] == "You are careful."
    assert sent["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "I need both files.",
        "signature": SIGNATURE,
    }


@pytest.mark.parametrize(
    ("level", "budget"),
    [("minimal", 1024), ("low", 2048), ("medium", 8192), ("high", 16384), ("none", None)],
)
async def test_thinking_levels_map_to_budgets(server: Any, level: str, budget: int | None) -> None:
    await run(
        server,
        K.sse(K.recording("anthropic_redacted.sse")),
        request=K.request(thinking_level=level),
        max_tokens=4000,
    )
    body = server.requests[0].json
    assert body.get("thinking") == (
        None if budget is None else {"type": "enabled", "budget_tokens": budget}
    )
    assert body["max_tokens"] == 4000 + (budget or 0)


async def test_unknown_thinking_level_is_a_permanent_failure(server: Any) -> None:
    messages, outcome = await run(server, request=K.request(thinking_level="ultra"))
    assert (messages, outcome.status, outcome.permanent) == ([], "failed", True)
    assert outcome.message == (
        "anthropic: cannot build the request: unknown thinking level 'ultra' "
        "(known: none, off, minimal, low, medium, high)"
    )
    assert server.requests == []


async def test_the_api_key_never_leaves(server: Any) -> None:
    echo = K.error(
        401,
        {
            "type": "error",
            "error": {"type": "authentication_error", "message": f"invalid x-api-key {KEY}"},
        },
    )
    server.queue(echo, K.sse(_events("anthropic_error.sse")[:3], end="reset"))
    llm = llm_for(server)
    seen = [repr(llm)]
    async with llm:
        for _ in range(2):
            messages, outcome = await K.drain(llm.stream(K.request()))
            seen += [repr(outcome), *(repr(m) for m in messages)]
    assert seen[1].count("[redacted]") == 1
    assert server.requests[0].headers["x-api-key"] == KEY
    assert not [s for s in seen if KEY in s]


def test_key_from_environment_only_for_anthropic_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    assert Anthropic("claude")._api_key == KEY
    assert Anthropic("claude", base_url="http://127.0.0.1:9")._api_key is None
    assert Anthropic("claude", base_url="https://proxy.example/v1").url == (
        "https://proxy.example/v1/messages"
    )
    assert KEY not in repr(Anthropic("claude"))
