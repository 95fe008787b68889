"""OpenAICompatible against a real HTTP server on 127.0.0.1 (SPEC §2.6, §3, R-RUN-16, R-RUN-20).

The server (tests/engine/sse/providerkit.py) replays recorded Chat Completions streams in the
providers' wire format and fails in every way the error table knows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import providerkit as K
import pytest

from engine import AbortSignal
from engine.llm import OpenAICompatible
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
KEY = "sk-test-7Hq2Zp9Lw4Xy"


@pytest.fixture
def server() -> Iterator[Any]:
    with K.SSEServer() as srv:
        yield srv


def llm_for(server: Any, **kw: Any) -> OpenAICompatible:
    return OpenAICompatible(model="gpt-4o", base_url=f"{server.url}/v1", api_key=KEY, **kw)


async def run(server: Any, *replies: Any, request: Any = None, **kw: Any) -> tuple[list[Any], Any]:
    server.queue(*replies)
    async with llm_for(server, **kw) as llm:
        return await K.drain(llm.stream(request or K.request()))


# --------------------------------------------------------------------------- success paths


@pytest.mark.parametrize("pieces", ["events", "7 bytes", "1 byte"])
async def test_text_stream_usage_and_request(server: Any, pieces: str) -> None:
    """R-STREAM-1/2: text deltas → one text; `:` pings ignored; usage only after [DONE]
    (R-RUN-16) with cache_read from cached_tokens; the request is a streaming POST."""
    body = K.recording("openai_text.sse")
    chunks = {
        "events": K.split_events(body),
        "7 bytes": K.split_every(body, 7),
        "1 byte": K.split_every(body, 1),
    }[pieces]
    messages, outcome = await run(server, K.sse(chunks))
    assert outcome.status == "completed" and outcome.message is None
    assert K.tags(messages) == [
        "partial_text:start",
        "partial_text:delta",
        "partial_text:delta",
        "partial_text:delta",
        "partial_text:delta",
        "partial_text:stop",
        "text",
        "token_usage",
    ]
    text, usage = K.completes(messages)
    assert isinstance(text, TextPayload) and text.text == "Hello, world!"
    assert text.role == "assistant" and text.stop_reason == "completed" and text.fidelity is None
    assert isinstance(usage, TokenUsagePayload)
    assert usage.request == TokenCounts(cache_read=1024, cache_write=176, output=37, total=1237)
    (sent,) = server.requests
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["accept"] == "text/event-stream"
    assert sent.json["stream"] is True
    assert sent.json["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("recording", "field", "thinking", "text"),
    [
        (
            "openai_reasoning_content.sse",
            "reasoning_content",
            "The user asks for 2+2. That is 4.",
            "2 + 2 = 4.",
        ),
        ("openai_reasoning.sse", "reasoning", "Okay, simple sum.", "Four."),
        ("openai_think_tags.sse", "think_tag", "\nThe user wants a sum.", "The answer is 4."),
    ],
)
async def test_reasoning_in_each_form(
    server: Any, recording: str, field: str, thinking: str, text: str
) -> None:
    """Reasoning as `reasoning_content`, `reasoning` or inline `<think>` tags (split across
    deltas) becomes a thinking segment with fidelity.reasoning_field naming its source."""
    messages, outcome = await run(server, K.sse(K.recording(recording)))
    assert outcome.status == "completed"
    think, answer, usage = K.completes(messages)
    assert isinstance(think, ThinkingPayload) and isinstance(answer, TextPayload)
    assert think.thinking == thinking and think.fidelity == {"reasoning_field": field}
    assert answer.text == text
    assert isinstance(usage, TokenUsagePayload)


async def test_think_tags_can_be_turned_off(server: Any) -> None:
    messages, _ = await run(server, K.sse(K.recording("openai_think_tags.sse")), think_tags=False)
    (answer, _usage) = K.completes(messages)
    assert answer.text.startswith("<think>\nThe user wants a sum.</think>\n\nThe answer")


async def test_parallel_tool_calls_with_fragmented_arguments(server: Any) -> None:
    """Fragments accumulate by index; a call closes (and can be dispatched) as soon as the
    next index starts (R-STREAM-1: its complete message right after its stop)."""
    messages, outcome = await run(server, K.sse(K.recording("openai_parallel_tools.sse")))
    assert outcome.status == "completed"
    assert K.tags(messages) == [
        "partial_text:start",
        "partial_text:delta",
        "partial_text:stop",
        "text",
        "partial_tool_call:start",
        "partial_tool_call:delta",
        "partial_tool_call:delta",
        "partial_tool_call:delta",
        "partial_tool_call:stop",
        "tool_call",
        "partial_tool_call:start",
        "partial_tool_call:delta",
        "partial_tool_call:delta",
        "partial_tool_call:delta",
        "partial_tool_call:stop",
        "tool_call",
        "token_usage",
    ]
    text, first, second, usage = K.completes(messages)
    assert text.text == "Reading both."
    assert (first.name, first.tool_call_id, first.arguments) == (
        "read_file",
        "call_Qx7a",
        '{"path": "a.txt"}',
    )
    assert (second.name, second.tool_call_id, second.arguments) == (
        "read_file",
        "call_Rb9c",
        '{"path": "b.txt", "limit": 10}',
    )
    assert messages[4].payload.name == "read_file"  # the start carries the name (R-STREAM-3)
    assert usage.request == TokenCounts(256, 44, 40, 340)


async def test_function_name_ids_are_made_unique(server: Any) -> None:
    """R-RUN-20: a provider reusing the function name as the id gets `<id>#<n>` inbound, with
    ids already in the context taken; outbound the suffix is stripped."""
    history = [
        b.user_text("read a"),
        b.tool_call("read_file", {"path": "x"}, "read_file"),
        b.tool_call_output("read_file", "x body"),
        b.user_text("now both"),
    ]
    messages, outcome = await run(
        server, K.sse(K.recording("openai_named_ids.sse")), request=K.request(*history)
    )
    assert outcome.status == "completed"
    calls = [p for p in K.completes(messages) if isinstance(p, ToolCallPayload)]
    assert [c.tool_call_id for c in calls] == ["read_file#2", "read_file#3"]
    assert [c.arguments for c in calls] == ['{"path":"a.txt"}', '{"path":"b.txt"}']
    # A whole call in one chunk still streams start, one delta, stop, complete.
    assert K.tags(messages)[:4] == [
        "partial_tool_call:start",
        "partial_tool_call:delta",
        "partial_tool_call:stop",
        "tool_call",
    ]


async def test_suffixed_ids_are_stripped_outbound(server: Any) -> None:
    history = [
        b.user_text("go"),
        b.tool_call("read_file", {"path": "a"}, "read_file"),
        b.tool_call("read_file", {"path": "b"}, "read_file#2"),
        b.tool_call_output("read_file", "A"),
        b.tool_call_output("read_file#2", "B"),
    ]
    await run(server, K.sse(K.recording("openai_text.sse")), request=K.request(*history))
    sent = server.requests[0].json["messages"]
    assert [c["id"] for c in sent[2]["tool_calls"]] == ["read_file", "read_file"]
    assert [m["tool_call_id"] for m in sent[3:]] == ["read_file", "read_file"]


async def test_raw_unicode_line_separators_stay_inside_data(server: Any) -> None:
    """SSE lines end only at CR, LF or CRLF: U+2028/U+0085 inside JSON are content, and bare
    CR line endings work (httpx's aiter_lines would split on the former)."""
    chunk = {"choices": [{"index": 0, "delta": {"content": "a\u2028b\u0085c"}}]}
    body = (
        "data: " + json.dumps(chunk, ensure_ascii=False) + "\r\r" + "data: [DONE]\r\n\r\n"
    ).encode()
    messages, outcome = await run(server, K.sse(K.split_every(body, 5)))
    assert outcome.status == "completed"
    (text,) = K.completes(messages)
    assert text.text == "a\u2028b\u0085c"


async def test_connection_is_reused(server: Any) -> None:
    """One shared client: two requests, one keep-alive connection."""
    server.queue(K.sse(K.recording("openai_text.sse")), K.sse(K.recording("openai_text.sse")))
    async with llm_for(server) as llm:
        for _ in range(2):
            _, outcome = await K.drain(llm.stream(K.request()))
            assert outcome.status == "completed"
    assert server.connections == 1


async def test_a_client_passed_in_is_used_and_left_open(server: Any) -> None:
    server.queue(K.sse(K.recording("openai_text.sse")))
    async with httpx.AsyncClient(headers={"x-team": "blue"}) as client:
        async with llm_for(server, client=client) as llm:
            _, outcome = await K.drain(llm.stream(K.request()))
        assert not client.is_closed
    assert outcome.status == "completed"
    assert server.requests[0].headers["x-team"] == "blue"


# --------------------------------------------------------------------------- failures

OPENAI_401 = {
    "error": {
        "message": "Incorrect API key provided: sk-test-****Xy4. You can find "
        "your API key at https://platform.openai.com/account/api-keys.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}


@pytest.mark.parametrize(
    ("reply", "status", "permanent", "message", "retry_after"),
    [
        pytest.param(
            K.error(401, OPENAI_401),
            "auth",
            False,
            "openai: HTTP 401: " + OPENAI_401["error"]["message"],
            None,
            id="401",
        ),
        pytest.param(
            K.error(
                403,
                {
                    "error": {
                        "message": "Country, region, or territory not supported",
                        "type": "request_forbidden",
                    }
                },
            ),
            "failed",
            False,
            "openai: HTTP 403: Country, region, or territory not supported",
            None,
            id="403",
        ),
        pytest.param(
            K.error(
                400,
                {
                    "error": {
                        "message": "Invalid schema for function 'read_file'.",
                        "type": "invalid_request_error",
                    }
                },
            ),
            "failed",
            True,
            "openai: HTTP 400: Invalid schema for function 'read_file'.",
            None,
            id="400",
        ),
        pytest.param(
            K.error(404, {"error": {"message": "The model `gpt-5o` does not exist"}}),
            "failed",
            True,
            "openai: HTTP 404: The model `gpt-5o` does not exist",
            None,
            id="404",
        ),
        pytest.param(
            K.error(
                429, {"error": {"message": "Rate limit reached for gpt-4o."}}, {"retry-after": "7"}
            ),
            "timeout",
            False,
            "openai: HTTP 429: Rate limit reached for gpt-4o.",
            7.0,
            id="429-retry-after",
        ),
        pytest.param(
            K.error(
                429,
                {"error": {"message": "slow down"}},
                {"retry-after-ms": "1500", "retry-after": "2"},
            ),
            "timeout",
            False,
            "openai: HTTP 429: slow down",
            1.5,
            id="429-ms",
        ),
        pytest.param(
            K.error(
                500,
                {
                    "error": {
                        "message": "The server had an error while "
                        "processing your request. Sorry about that!"
                    }
                },
            ),
            "timeout",
            False,
            "openai: HTTP 500: The server had an error while "
            "processing your request. Sorry about that!",
            None,
            id="500",
        ),
        pytest.param(
            K.error(529, "upstream overloaded"),
            "timeout",
            False,
            "openai: HTTP 529: upstream overloaded",
            None,
            id="529",
        ),
        pytest.param(
            K.Reply(503, [], {}),
            "timeout",
            False,
            "openai: HTTP 503: Service Unavailable",
            None,
            id="503-empty",
        ),
        pytest.param(
            K.Reply(
                200,
                [b'{"error": {"message": "stream not supported"}}'],
                {"content-type": "application/json"},
            ),
            "malformed",
            False,
            "openai: expected an event stream, got application/json: stream not supported",
            None,
            id="json-200",
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
    """The error table (SPEC §2.6): each status → outcome, the provider's own text in the
    message, Retry-After surfaced; nothing but the outcome is yielded."""
    messages, outcome = await run(server, reply)
    assert messages == []
    assert (outcome.status, outcome.permanent, outcome.message, outcome.retry_after_s) == (
        status,
        permanent,
        message,
        retry_after,
    )


def _first_events(n: int) -> list[bytes]:
    return K.split_events(K.recording("openai_text.sse"))[:n]


@pytest.mark.parametrize(
    ("reply", "status", "message"),
    [
        pytest.param(
            K.sse(_first_events(4), end="cut"),
            "timeout",
            "openai: connection lost: peer closed connection without sending complete "
            "message body (incomplete chunked read)",
            id="cut-mid-body",
        ),
        pytest.param(
            K.sse(_first_events(4)),
            "timeout",
            "openai: stream ended before [DONE]",
            id="ended-before-done",
        ),
        pytest.param(
            K.sse([*_first_events(4), b"data: {not json\n\n"]),
            "malformed",
            "openai: malformed stream: invalid JSON: {not json",
            id="garbage-json",
        ),
        pytest.param(
            K.sse([*_first_events(4), b'data: {"choices": "nope"}\n\n']),
            "malformed",
            "openai: malformed stream: unexpected chunk shape (Expected `array | null`, "
            'got `str` - at `$.choices`): {"choices": "nope"}',
            id="wrong-shape",
        ),
        pytest.param(
            K.sse(
                [
                    *_first_events(4),
                    b'data: {"error": {"message": "upstream overloaded", "code": 502}}\n\n',
                ]
            ),
            "timeout",
            "openai: stream error: 502: upstream overloaded",
            id="error-chunk",
        ),
    ],
)
async def test_stream_failures_close_the_open_segment(
    server: Any, reply: Any, status: str, message: str
) -> None:
    """A stream that breaks mid-text: the open segment closes with the failure's stop_reason
    (R-STREAM-4), no token_usage is yielded (R-RUN-16), the outcome carries the text."""
    messages, outcome = await run(server, reply)
    assert (outcome.status, outcome.message) == (status, message)
    assert K.tags(messages)[-2:] == ["partial_text:stop", "text"]
    (text,) = K.completes(messages)
    assert (text.text, text.stop_reason) == ("Hello, wor", status)


async def test_connection_reset_mid_stream(server: Any) -> None:
    messages, outcome = await run(server, K.sse(_first_events(4), end="reset"))
    assert outcome.status == "timeout"
    assert outcome.message.startswith("openai: connection lost: ")
    assert "reset" in outcome.message.lower()
    (text,) = K.completes(messages)
    assert (text.text, text.stop_reason) == ("Hello, wor", "timeout")


async def test_truncated_tool_arguments_are_malformed(server: Any) -> None:
    """A tool call whose arguments are not JSON when the stream finishes is closed `malformed`
    (never dispatched, R-RUN-12) and the request is `malformed` (retried)."""
    events = K.split_events(K.recording("openai_parallel_tools.sse"))
    cut = [e for e in events if b"limit" not in e]
    messages, outcome = await run(server, K.sse(cut))
    assert outcome.status == "malformed"
    assert outcome.message.startswith(
        "openai: tool call read_file (call_Rb9c) arguments are not valid JSON ("
    )
    assert outcome.message.endswith('): {"path": "b.txt", ')
    calls = [p for p in K.completes(messages) if isinstance(p, ToolCallPayload)]
    assert [(c.tool_call_id, c.stop_reason) for c in calls] == [
        ("call_Qx7a", "completed"),
        ("call_Rb9c", "malformed"),
    ]
    assert not any(isinstance(p, TokenUsagePayload) for p in K.completes(messages))


async def test_connect_error_is_timeout() -> None:
    with K.SSEServer() as srv:
        url = srv.url  # a port that was just ours and is now closed
    async with OpenAICompatible("m", base_url=url, api_key=KEY) as llm:
        messages, outcome = await K.drain(llm.stream(K.request()))
    assert messages == []
    assert outcome.status == "timeout"
    assert outcome.message.startswith("openai: cannot connect: ")


# --------------------------------------------------------------------------- abort


@pytest.mark.parametrize("from_thread", [False, True])
async def test_abort_cancels_the_http_stream(server: Any, from_thread: bool) -> None:
    """R-STREAM-4: the signal cancels the read in flight (the server has stopped sending), the
    open segment closes `aborted` with what arrived, the outcome is `aborted`."""
    signal = AbortSignal()
    got_delta = anyio.Event()

    def on(msg: Any) -> None:
        if msg.is_partial and msg.payload.event_type == "delta":
            got_delta.set()

    async def abort_while_reading() -> None:
        await got_delta.wait()
        await anyio.to_thread.run_sync(server.hung.wait)
        await anyio.wait_all_tasks_blocked()  # the adapter now waits on the socket
        if from_thread:
            await anyio.to_thread.run_sync(signal.abort)
        else:
            signal.abort()

    server.queue(K.sse(_first_events(3), end="hang"))
    async with llm_for(server) as llm, anyio.create_task_group() as tg:
        tg.start_soon(abort_while_reading)
        with anyio.fail_after(10):  # a safety net: without the abort this would hang
            messages, outcome = await K.drain(llm.stream(K.request(signal=signal)), on=on)
    assert (outcome.status, outcome.message) == ("aborted", None)
    assert K.tags(messages) == [
        "partial_text:start",
        "partial_text:delta",
        "partial_text:stop",
        "text",
    ]
    (text,) = K.completes(messages)
    assert (text.text, text.stop_reason) == ("Hello", "aborted")


async def test_leaving_the_stream_early_closes_the_response(server: Any) -> None:
    """A consumer that stops iterating (aclose) releases the HTTP response: the half-read
    connection is dropped, not returned to the pool, so the next request opens a new one."""
    server.queue(K.sse(_first_events(3), end="hang"), K.sse(K.recording("openai_text.sse")))
    async with llm_for(server) as llm:
        stream = llm.stream(K.request())
        first = await anext(stream)
        assert first.payload.event_type == "start"
        await stream.aclose()  # type: ignore[attr-defined]
        _, outcome = await K.drain(llm.stream(K.request()))
    assert outcome.status == "completed"
    assert server.connections == 2


async def test_abort_before_the_request_sends_nothing(server: Any) -> None:
    signal = AbortSignal()
    signal.abort()
    messages, outcome = await run(server, request=K.request(signal=signal))
    assert (messages, outcome.status) == ([], "aborted")
    assert server.requests == []


# --------------------------------------------------------------------------- request shape

READ_FILE = ToolDefinition(
    name="read_file",
    description="Read a file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
PNG = "data:image/png;base64,iVBORw0KGgo="


def _context() -> list[Any]:
    return [
        b.user_text("Look at these."),
        b.image_url("https://example.com/cat.png"),
        b.inline_data("iVBORw0KGgo=", "image/png"),
        b.thinking("Two files.", fidelity={"reasoning_field": "reasoning_content"}),
        b.thinking("<signed>", fidelity={"signature": "c2ln"}),
        b.assistant_text("Reading."),
        b.tool_call("read_file", {"path": "a.txt"}, "call_1"),
        b.tool_call("read_file", {"path": "b.txt"}, "read_file#2"),
        b.tool_call("read_file", '{"path": "c', "call_x", stop_reason="timeout"),
        b.tool_call_output("call_1", "A", images=[PNG]),
        b.tool_call_output("read_file#2", "B", stop_reason="failed"),
        b.user_text("[user_steering]\nalso c\n[/user_steering]", sender="harness"),
    ]


async def test_request_body_for_tool_pairs_images_and_thinking(server: Any) -> None:
    """Chat Completions shape: system first; user text and images as content parts; thinking
    omitted; text and calls in one assistant message (ids stripped of `#n`, interrupted calls
    left out); one tool message per output, images after them in a user message."""
    request = K.request(*_context(), tools=[READ_FILE], thinking_level="high")
    await run(server, K.sse(K.recording("openai_text.sse")), request=request)
    assert server.requests[0].json == {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "You are careful."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look at these."},
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                    {"type": "image_url", "image_url": {"url": PNG}},
                ],
            },
            {
                "role": "assistant",
                "content": "Reading.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path":"a.txt"}'},
                    },
                    {
                        "id": "read_file",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path":"b.txt"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "A"},
            {"role": "tool", "tool_call_id": "read_file", "content": "B"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "[images returned by tool call call_1]"},
                    {"type": "image_url", "image_url": {"url": PNG}},
                    {"type": "text", "text": "[user_steering]\nalso c\n[/user_steering]"},
                ],
            },
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read_file",
                    "description": "Read a file.",
                    "parameters": READ_FILE.parameters,
                },
            }
        ],
        "reasoning_effort": "high",
    }


async def test_reasoning_is_sent_back_only_when_asked(server: Any) -> None:
    request = K.request(*_context()[:7])
    await run(
        server,
        K.sse(K.recording("openai_text.sse")),
        request=request,
        send_reasoning=True,
        vision=False,
        extra_body={"temperature": 0},
    )
    body = server.requests[0].json
    assistant = body["messages"][2]
    assert assistant["reasoning_content"] == "Two files."
    assert "reasoning_effort" not in body and body["temperature"] == 0


# --------------------------------------------------------------------------- the key


async def test_the_api_key_never_leaves(server: Any) -> None:
    """Forced errors: a server that echoes the key, a broken stream, a refused connection —
    the key is sent to the server and appears in no outcome message and no repr."""
    echo = K.error(401, {"error": {"message": f"Incorrect API key provided: {KEY}"}})
    server.queue(echo, K.sse(_first_events(2), end="cut"))
    llm = llm_for(server)
    seen: list[str] = [repr(llm), str(llm)]
    async with llm:
        for _ in range(2):
            messages, outcome = await K.drain(llm.stream(K.request()))
            seen += [repr(outcome), *(repr(m) for m in messages)]
    assert seen[2].count("[redacted]") == 1
    async with OpenAICompatible("m", base_url="http://127.0.0.1:1", api_key=KEY) as refused:
        _, outcome = await K.drain(refused.stream(K.request()))
        seen.append(repr(outcome))
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert not [s for s in seen if KEY in s]


async def test_key_from_environment_only_for_openai_itself(
    monkeypatch: pytest.MonkeyPatch, server: Any
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    assert OpenAICompatible("gpt-4o")._api_key == KEY
    assert OpenAICompatible("m", base_url=server.url)._api_key is None
    server.queue(K.sse(K.recording("openai_text.sse")))
    async with OpenAICompatible("m", base_url=server.url) as llm:
        await K.drain(llm.stream(K.request()))
    assert "authorization" not in server.requests[0].headers
