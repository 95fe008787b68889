"""A real HTTP/1.1 server on 127.0.0.1 for the provider tests: replays queued replies.

Runs its own event loop in a thread (anyio's blocking portal), so a test's loop only ever talks
to it over TCP, as it would to a provider.  Each queued ``Reply`` answers one request; the body
goes out with chunked transfer encoding, one HTTP chunk per listed piece, and the reply's ``end``
decides how the response finishes: ``done`` (clean, keep-alive), ``cut`` (the socket closes
without the terminating chunk), ``reset`` (a TCP RST after the pieces) or ``hang`` (nothing more
is sent until the client goes away).  A ``Gate`` among the pieces holds the reply there until
the test opens it: a stream that stops mid-answer for as long as the test needs, without sleeps.
"""

from __future__ import annotations

import http
import json
import socket
import struct
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc
import anyio.from_thread
import anyio.to_thread

HERE = Path(__file__).resolve().parents[1] / "engine" / "sse"


def recording(name: str) -> bytes:
    """A recorded SSE body from this directory."""
    return (HERE / name).read_bytes()


def split_events(body: bytes) -> list[bytes]:
    """One piece per SSE event (blank-line separated), as providers flush them."""
    pieces = body.split(b"\n\n")
    out = [p + b"\n\n" for p in pieces[:-1]]
    if pieces[-1]:
        out.append(pieces[-1])
    return out


def split_every(body: bytes, size: int) -> list[bytes]:
    """Fixed-size pieces: lines, CRLFs and UTF-8 characters straddle piece boundaries."""
    return [body[i : i + size] for i in range(0, len(body), size)]


@dataclass(eq=False)
class Gate:
    """A point in a reply's body where the server waits: ``reached`` is set when the pieces
    before it are sent; nothing more is sent until the test calls ``open()``."""

    reached: threading.Event = field(default_factory=threading.Event)
    opened: threading.Event = field(default_factory=threading.Event)

    def open(self) -> None:
        self.opened.set()


@dataclass
class Reply:
    status: int = 200
    body: bytes | Sequence[bytes | Gate] = b""
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "text/event-stream"})
    end: Literal["done", "cut", "reset", "hang"] = "done"

    def pieces(self) -> list[bytes | Gate]:
        if isinstance(self.body, bytes):
            return split_events(self.body) if self.body else []
        return list(self.body)


def sse(body: bytes | Sequence[bytes | Gate], **kw: Any) -> Reply:
    return Reply(200, body, **kw)


def error(status: int, body: str | dict[str, Any], headers: dict[str, str] | None = None) -> Reply:
    raw = body if isinstance(body, str) else json.dumps(body)
    hdrs = {"content-type": "application/json" if isinstance(body, dict) else "text/plain"}
    hdrs.update(headers or {})
    return Reply(status, [raw.encode()], hdrs)


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class SSEServer:
    """Start with ``start()`` (or use as a context manager); queue replies in ``replies``."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Received] = []
        self.connections = 0
        self.hung = threading.Event()
        self._stack = ExitStack()
        self._port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def queue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def __enter__(self) -> SSEServer:
        portal = self._stack.enter_context(anyio.from_thread.start_blocking_portal())
        listener = portal.call(self._listen)
        self._port = listener.extra(anyio.abc.SocketAttribute.local_port)
        future = portal.start_task_soon(listener.serve, self._handle)
        self._stack.callback(portal.call, listener.aclose)
        self._stack.callback(future.cancel)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    @staticmethod
    async def _listen() -> anyio.abc.SocketListener:
        return await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)

    async def _handle(self, stream: anyio.abc.SocketStream) -> None:
        self.connections += 1
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    buf += await stream.receive()
                head, buf = buf.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                size = int(headers.get("content-length", "0"))
                while len(buf) < size:
                    buf += await stream.receive()
                body, buf = buf[:size], buf[size:]
                self.requests.append(Received(method, path, headers, body))
                reply = self.replies.popleft() if self.replies else Reply(599, [b"no reply queued"])
                if not await self._respond(stream, reply):
                    return
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()

    async def _respond(self, stream: anyio.abc.SocketStream, reply: Reply) -> bool:
        try:
            phrase = http.HTTPStatus(reply.status).phrase
        except ValueError:
            phrase = "Overloaded" if reply.status == 529 else "Unknown"
        head = [f"HTTP/1.1 {reply.status} {phrase}", "transfer-encoding: chunked"]
        head += [f"{k}: {v}" for k, v in reply.headers.items()]
        await stream.send(("\r\n".join(head) + "\r\n\r\n").encode())
        for piece in reply.pieces():
            if isinstance(piece, Gate):
                piece.reached.set()
                await anyio.to_thread.run_sync(piece.opened.wait, abandon_on_cancel=True)
            elif piece:
                await stream.send(b"%x\r\n%s\r\n" % (len(piece), piece))
        if reply.end == "done":
            await stream.send(b"0\r\n\r\n")
            return True
        if reply.end == "reset":
            # Let the pieces reach the client first, then abort the connection (RST).
            await anyio.sleep(0.05)
            raw: socket.socket = stream.extra(anyio.abc.SocketAttribute.raw_socket)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return False
        if reply.end == "hang":
            self.hung.set()
            while True:  # until the client closes the connection
                await stream.receive()
        return False  # cut: close without the terminating chunk


def served(*replies: Reply) -> Iterator[SSEServer]:
    with SSEServer() as server:
        server.queue(*replies)
        yield server


# --------------------------------------------------------------------------- stream helpers


def request(
    *messages: Any,
    system_prompt: str = "You are careful.",
    tools: list[Any] | None = None,
    thinking_level: str | None = None,
    signal: Any = None,
) -> Any:
    from engine import AbortSignal, LLMRequest
    from eventstore import builders as b

    msgs = list(messages) or [b.user_text("hi")]
    return LLMRequest(
        system_prompt=system_prompt,
        tools=tools or [],
        messages=msgs,
        new_messages=len(msgs),
        thinking_level=thinking_level,
        signal=signal or AbortSignal(),
    )


async def drain(stream: Any, *, on: Any = None) -> tuple[list[Any], Any]:
    """Every message of an LLM stream and its outcome; asserts the outcome comes exactly once,
    last, and that the streaming discipline holds (R-STREAM-1/2/4)."""
    from engine import LLMOutcome

    messages: list[Any] = []
    outcome = None
    async for item in stream:
        assert outcome is None, "the outcome must be the last item"
        if isinstance(item, LLMOutcome):
            outcome = item
            continue
        messages.append(item)
        if on is not None:
            on(item)
    assert outcome is not None, "the stream ended without an outcome"
    assert_discipline(messages)
    return messages, outcome


def _content(p: Any) -> tuple[Any, ...]:
    tag = p.__struct_config__.tag
    body = getattr(p, "text", None)
    if body is None:
        body = getattr(p, "thinking", None)
    if body is None:
        body = getattr(p, "arguments", None)
    return (tag, body, getattr(p, "tool_call_id", None), getattr(p, "name", None), p.stop_reason)


def assert_discipline(messages: list[Any]) -> None:
    """R-STREAM-1/2/4: start, deltas, stop, then at once the complete message whose content is
    the concatenation of the fragments, with the stop's stop_reason; nothing left open."""
    from eventstore.partials import PartialAggregator

    agg = PartialAggregator()
    expect: Any = None
    for msg in messages:
        if expect is not None:
            assert not msg.is_partial, f"complete message expected right after stop, got {msg}"
            got = _content(msg.payload)
            want = _content(expect.payload)
            if want[3] is not None:  # the aggregate's name is the last non-empty fragment name
                assert got[:3] + got[4:] == want[:3] + want[4:] and got[3] == want[3], (got, want)
            else:
                assert got == want, (got, want)
            expect = None
            continue
        if msg.is_partial:
            done = agg.feed(msg)
            if done:
                assert len(done) == 1 and msg.payload.event_type == "stop", done
                expect = done[0]
        else:
            tag = msg.payload.__struct_config__.tag
            assert tag not in {"text", "thinking", "tool_call"}, f"{tag} without its partials"
    assert expect is None, "a stop was not followed by its complete message"
    assert agg.open_count == 0, "an open segment was leaked (R-STREAM-4)"


def tags(messages: list[Any]) -> list[str]:
    out = []
    for m in messages:
        p = m.payload
        tag = str(p.__struct_config__.tag)
        if m.is_partial:
            tag += f":{p.event_type}"
        out.append(tag)
    return out


def completes(messages: list[Any]) -> list[Any]:
    return [m.payload for m in messages if not m.is_partial]
