"""Provider stream parsing: deltas per second through each adapter, against httpx itself.

A recorded 10,000-delta stream per protocol (Chat Completions text deltas; Messages
``text_delta`` events) is fed from memory through ``httpx.MockTransport`` in 16 KiB chunks, so
no socket is involved.  Three figures per protocol, measured in the same run on the same bytes:

- ``httpx lines``: a bare ``async for line in response.aiter_lines()`` over the response (the
  baseline: what reading the stream costs before anything is parsed);
- ``sse + parser``: our SSE framing and the adapter's parser without HTTP (pure CPU);
- ``adapter``: ``llm.stream(request)`` end to end (request build, SSE, JSON decode, partials and
  complete messages, abort guard per event).

The ratio ``adapter / httpx lines`` is the price of the whole translation relative to merely
iterating the lines.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx

from engine import AbortSignal, LLMRequest
from engine.llm import Anthropic, OpenAICompatible
from engine.llm._anthropic import AnthropicStreamParser
from engine.llm._ids import ToolCallIds
from engine.llm._openai import OpenAIStreamParser
from engine.llm._sse import SSEDecoder
from eventstore import builders as b

DELTAS = 10_000
CHUNK = 16 * 1024
ROUNDS = 5


def _openai_recording(n: int) -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        body = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-4o",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        return "data: " + json.dumps(body, separators=(",", ":")) + "\n\n"

    parts = [chunk({"role": "assistant", "content": ""})]
    parts += [chunk({"content": f"word{i} "}) for i in range(n)]
    parts.append(chunk({}, "stop"))
    usage = {"prompt_tokens": 10, "completion_tokens": n, "total_tokens": n + 10}
    parts.append("data: " + json.dumps({"choices": [], "usage": usage}) + "\n\n")
    parts.append("data: [DONE]\n\n")
    return "".join(parts).encode()


def _anthropic_recording(n: int) -> bytes:
    def event(kind: str, data: dict[str, Any]) -> str:
        return f"event: {kind}\ndata: " + json.dumps(data, separators=(",", ":")) + "\n\n"

    parts = [
        event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_bench",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "claude",
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            },
        )
    ]
    parts.append(
        event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        )
    )
    parts += [
        event(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": f"word{i} "},
            },
        )
        for i in range(n)
    ]
    parts.append(event("content_block_stop", {"type": "content_block_stop", "index": 0}))
    parts.append(
        event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": n},
            },
        )
    )
    parts.append(event("message_stop", {"type": "message_stop"}))
    return "".join(parts).encode()


class _Chunks(httpx.AsyncByteStream):
    def __init__(self, body: bytes) -> None:
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        body = self._body
        for at in range(0, len(body), CHUNK):
            yield body[at : at + CHUNK]


def _client(body: bytes) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=_Chunks(body)
        )

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


def _request() -> LLMRequest:
    return LLMRequest(
        system_prompt="bench",
        tools=[],
        messages=[b.user_text("go")],
        new_messages=1,
        thinking_level=None,
        signal=AbortSignal(),
    )


async def _best(run: Callable[[], Awaitable[int]]) -> tuple[float, int]:
    best = float("inf")
    count = 0
    for _ in range(ROUNDS):
        start = time.perf_counter()
        count = await run()
        best = min(best, time.perf_counter() - start)
    return best, count


async def _measure(
    name: str,
    body: bytes,
    llm_factory: Callable[[httpx.AsyncClient], Any],
    parser_factory: Callable[[], Any],
) -> None:
    async with _client(body) as client:

        async def lines() -> int:
            n = 0
            async with client.stream("POST", "http://bench.invalid/") as response:
                async for _line in response.aiter_lines():
                    n += 1
            return n

        async def parse() -> int:
            decoder = SSEDecoder()
            parser = parser_factory()
            n = 0
            for at in range(0, len(body), CHUNK):
                for event in decoder.feed(body[at : at + CHUNK]):
                    parser.feed(event)
                    n += len(parser.out)
                    parser.out = []
            return n

        llm = llm_factory(client)

        async def adapter() -> int:
            n = 0
            async for item in llm.stream(_request()):
                n += 1
                last = item
            assert getattr(last, "status", None) == "completed", last
            return n

        t_lines, n_lines = await _best(lines)
        t_parse, _ = await _best(parse)
        t_adapter, n_items = await _best(adapter)
    assert n_items >= DELTAS
    mb = len(body) / 2**20
    print(f"{name}: {DELTAS} deltas, {mb:.1f} MiB, {n_lines} lines")
    for label, seconds in (
        ("httpx lines", t_lines),
        ("sse + parser", t_parse),
        ("adapter", t_adapter),
    ):
        print(
            f"  {label:<13} {DELTAS / seconds:>12,.0f} deltas/s  {seconds * 1000:8.1f} ms"
            f"  {seconds / t_lines:6.2f}x httpx lines"
        )


async def _main() -> None:
    await _measure(
        "openai (chat completions)",
        _openai_recording(DELTAS),
        lambda client: OpenAICompatible(
            "gpt-4o", base_url="http://bench.invalid/v1", api_key="k", client=client
        ),
        lambda: OpenAIStreamParser(provider="openai", ids=ToolCallIds()),
    )
    await _measure(
        "anthropic (messages)",
        _anthropic_recording(DELTAS),
        lambda client: Anthropic(
            "claude", api_key="k", base_url="http://bench.invalid", client=client
        ),
        lambda: AnthropicStreamParser(provider="anthropic", ids=ToolCallIds()),
    )


def main() -> None:
    anyio.run(_main)


if __name__ == "__main__":
    main()
