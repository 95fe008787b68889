"""The provider plumbing without a provider: SSE framing, the error table (SPEC §2.6), the
tool-call id allocator (R-RUN-20) and the abort guard."""

from __future__ import annotations

import email.utils
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest

from engine import AbortSignal
from engine.llm._errors import (
    classify_status,
    error_text,
    redact,
    retry_after,
    stream_error_outcome,
    transport_outcome,
)
from engine.llm._ids import ToolCallIds, strip_suffix
from engine.llm._sse import Aborted, AbortGuard, ServerSentEvent, SSEDecoder, iter_sse
from eventstore import builders as b

# --------------------------------------------------------------------------- SSE framing


def _decode(*chunks: bytes) -> list[tuple[str, str]]:
    decoder = SSEDecoder()
    events: list[ServerSentEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    last = decoder.flush()
    if last is not None:
        events.append(last)
    return [(e.event, e.data) for e in events]


def test_fields_comments_and_multiline_data() -> None:
    body = (
        b"\xef\xbb\xbf: ping\n"
        b'event: content_block_delta\ndata: {"a":\ndata:1}\nid: 7\nretry: 10\n\n'
        b"data\n\n"
        b"\n\n"
        b"data:no-space\n\n"
    )
    assert _decode(body) == [
        ("content_block_delta", '{"a":\n1}'),
        ("", ""),
        ("", "no-space"),
    ]


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_line_endings_and_chunk_boundaries(size: int) -> None:
    """CR, LF and CRLF end lines, also when a CRLF or a UTF-8 character is split between two
    network chunks; nothing else does (U+2028, U+0085, VT, FF stay in the data)."""
    body = "data: é\u2028x\x0b\x0c\u0085\r\n\r\ndata: two\r\rdata: three\n\n".encode()
    chunks = [body[i : i + size] for i in range(0, len(body), size)]
    assert _decode(*chunks) == [("", "é\u2028x\x0b\x0c\u0085"), ("", "two"), ("", "three")]


def test_a_last_event_without_its_blank_line_is_dispatched() -> None:
    assert _decode(b"data: [DONE]") == [("", "[DONE]")]
    assert _decode(b"data: [DONE]\n") == [("", "[DONE]")]
    assert _decode(b"event: x\n") == []


@pytest.mark.anyio
async def test_iter_sse() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"data: a\n"
        yield b"\ndata: b"

    assert [e.data async for e in iter_sse(chunks())] == ["a", "b"]


# --------------------------------------------------------------------------- the error table


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (400, ("failed", True)),
        (401, ("auth", False)),
        (402, ("failed", False)),
        (403, ("failed", False)),
        (404, ("failed", True)),
        (405, ("failed", True)),
        (408, ("timeout", False)),
        (409, ("timeout", False)),
        (413, ("failed", True)),
        (418, ("failed", False)),
        (422, ("failed", True)),
        (425, ("timeout", False)),
        (429, ("timeout", False)),
        (500, ("timeout", False)),
        (502, ("timeout", False)),
        (503, ("timeout", False)),
        (504, ("timeout", False)),
        (529, ("timeout", False)),
        (302, ("failed", False)),
    ],
)
def test_status_table(status: int, outcome: tuple[str, bool]) -> None:
    """SPEC §2.6 / R-RETRY-1: auth stops, permanent client errors stop, 403 is retried as
    failed, throttling and server errors are transient (timeout)."""
    assert classify_status(status) == outcome


def test_retry_after_forms() -> None:
    now = 1_750_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert retry_after(httpx.Headers({"retry-after": "7"})) == 7.0
    assert retry_after(httpx.Headers({"retry-after": "0.5"})) == 0.5
    assert retry_after(httpx.Headers({"retry-after": date}), now=now) == 30.0
    assert retry_after(httpx.Headers({"retry-after": date}), now=now + 60) == 0.0
    assert retry_after(httpx.Headers({"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    assert retry_after(httpx.Headers({"retry-after": "soon"})) is None
    assert retry_after(httpx.Headers({"retry-after": "-3"})) is None
    assert retry_after(httpx.Headers({})) is None


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (b'{"error": {"message": "Bad key", "type": "invalid_request_error"}}', "Bad key"),
        (
            b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}',
            "overloaded_error: Overloaded",
        ),
        (b'{"error": "model not found"}', "model not found"),
        (b'{"detail": "Not Found"}', "Not Found"),
        (b'{"error": {"type": "server_error"}}', "server_error"),
        (b"<html>502 Bad Gateway</html>\n", "<html>502 Bad Gateway</html>"),
        (b'{"unrelated": 1}', '{"unrelated": 1}'),
    ],
)
def test_error_text_is_the_providers_own(body: bytes, text: str) -> None:
    assert error_text(body) == text


def test_long_error_bodies_are_bounded() -> None:
    assert len(error_text(b"x" * 10_000)) == 2001


def test_transport_outcomes() -> None:
    def outcome(exc: Exception) -> tuple[str, str | None]:
        o = transport_outcome("p", exc, secret="KEY")
        return o.status, o.message

    wrapped = httpx.ReadError("")
    wrapped.__cause__ = ConnectionResetError(104, "Connection reset by peer")
    assert outcome(wrapped) == (
        "timeout",
        "p: connection lost: [Errno 104] Connection reset by peer",
    )
    assert outcome(httpx.ConnectError("refused")) == ("timeout", "p: cannot connect: refused")
    assert outcome(httpx.ReadTimeout("")) == ("timeout", "p: read timeout")
    assert outcome(httpx.RemoteProtocolError("peer closed")) == (
        "timeout",
        "p: connection lost: peer closed",
    )
    assert outcome(httpx.UnsupportedProtocol("ftp://x")) == (
        "failed",
        "p: unsupported protocol: ftp://x",
    )
    assert outcome(ValueError("KEY leaked")) == ("failed", "p: ValueError: [redacted] leaked")


@pytest.mark.parametrize(
    ("kind", "status", "permanent"),
    [
        ("overloaded_error", "timeout", False),
        ("rate_limit_error", "timeout", False),
        ("api_error", "timeout", False),
        ("authentication_error", "auth", False),
        ("invalid_request_error", "failed", True),
        ("permission_error", "failed", False),
        ("502", "timeout", False),
        ("server_error", "failed", False),
        (None, "failed", False),
    ],
)
def test_stream_errors_share_the_table(kind: str | None, status: str, permanent: bool) -> None:
    o = stream_error_outcome("anthropic", kind, "boom", secret=None)
    assert (o.status, o.permanent) == (status, permanent)
    assert o.message == f"anthropic: stream error: {kind + ': ' if kind else ''}boom"


def test_redact() -> None:
    assert redact("key=abc, again abc", "abc") == "key=[redacted], again [redacted]"
    assert redact("nothing", None) == "nothing"


# --------------------------------------------------------------------------- tool-call ids


def test_allocator_suffixes_reused_ids() -> None:
    """R-RUN-20: the first keeps its id, repeats get the smallest free `#n` (n >= 2)."""
    ids = ToolCallIds()
    assert [ids.allocate("read") for _ in range(3)] == ["read", "read#2", "read#3"]
    assert ids.allocate("call_x") == "call_x"


def test_allocator_is_seeded_from_the_context() -> None:
    ids = ToolCallIds()
    ids.seed(
        [b.user_text("x"), b.tool_call("read", "{}", "read"), b.tool_call_output("read#3", "y")]
    )
    assert "read" in ids and "read#3" in ids and len(ids) == 2
    assert [ids.allocate("read") for _ in range(3)] == ["read#2", "read#4", "read#5"]


@pytest.mark.parametrize(
    ("given", "sent"),
    [
        ("read#2", "read"),
        ("read#12", "read"),
        ("read", "read"),
        ("a#b", "a#b"),
        ("x#2#3", "x#2"),
        ("call_1", "call_1"),
        ("#5", ""),
    ],
)
def test_strip_suffix(given: str, sent: str) -> None:
    assert strip_suffix(given) == sent


# --------------------------------------------------------------------------- abort guard


@pytest.mark.anyio
async def test_abort_guard_cancels_the_await_in_flight() -> None:
    signal = AbortSignal()
    guard = AbortGuard(signal)
    result: list[str] = []

    async def wait() -> None:
        try:
            await guard(anyio.sleep_forever())
        except Aborted:
            result.append("aborted")

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        await anyio.to_thread.run_sync(signal.abort)  # from another thread
    guard.close()
    assert result == ["aborted"]


@pytest.mark.anyio
async def test_abort_guard_after_the_signal_does_not_await() -> None:
    """An already fired signal: the coroutine is closed, never awaited (no warning)."""
    signal = AbortSignal()
    guard = AbortGuard(signal)
    signal.abort()
    with pytest.raises(Aborted):
        await guard(anyio.sleep(0))

    async def three() -> int:
        return 3

    assert await AbortGuard(AbortSignal())(three()) == 3
