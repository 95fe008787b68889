"""Server-sent events over httpx, abort-aware, for the streaming adapters.

Owns: SSE framing and field parsing (WHATWG "event stream" rules); the request driver shared by
the adapters (send, status check, error body, abort, read errors, terminator, close); the abort
guard that turns ``AbortSignal`` into a prompt cancellation of whatever HTTP I/O is in flight;
the clock both adapters stamp their segments with (``eventstore.partials.SegmentWriter``,
R-STREAM-1/2/4).  Does not: know a provider's event vocabulary (the adapters' parsers), classify
errors (``_errors``) or retry (the engine).

Why lines are split here and not by ``httpx.Response.aiter_lines``: httpx splits with
``str.splitlines``, which also breaks on U+2028, U+2029, U+0085, VT, FF and U+001C..U+001E.  Those
are legal unescaped characters inside a JSON string, and models do write them; the SSE grammar
ends lines only at CR, LF or CRLF.  So httpx still does everything below the line (connection,
chunked transfer, content decoding: ``aiter_bytes``) and this module only splits bytes on CR/LF
(UTF-8 never puts those bytes inside a multi-byte character) and decodes each line.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

import anyio
import anyio.lowlevel
import httpx
import msgspec

from engine._protocols import LLMOutcome
from engine._signal import AbortSignal
from eventstore import OmniMessage, StopReason
from eventstore.builders import now_iso

from ._errors import error_text, http_outcome, redact, transport_outcome

__all__ = [
    "DEFAULT_TIMEOUT",
    "DONE",
    "HTTP2",
    "AbortGuard",
    "Aborted",
    "EventParser",
    "SSEDecoder",
    "ServerSentEvent",
    "arguments_problem",
    "display_url",
    "iter_sse",
    "run_sse",
    "single_outcome",
    "stamp",
]

T = TypeVar("T")

DEFAULT_TIMEOUT: Final = httpx.Timeout(connect=15.0, read=300.0, write=60.0, pool=30.0)
"""Read is generous: a reasoning model may think for minutes before its first byte."""

HTTP2: Final = importlib.util.find_spec("h2") is not None
"""HTTP/2 only when its optional dependency is importable; HTTP/1.1 keep-alive otherwise."""

_ERROR_BODY_LIMIT: Final = 64 * 1024
_DRAIN_S: Final = 1.0
DONE: Final = True
"""What ``EventParser.feed`` returns when it has seen the stream's terminator."""


# --------------------------------------------------------------------------- framing


@dataclass(slots=True)
class ServerSentEvent:
    """One dispatched event: its ``event`` field (``""`` when absent) and joined ``data``."""

    event: str
    data: str


class SSEDecoder:
    """Bytes in, events out.  Keep one per response.

    ``feed`` returns the events completed by a chunk; ``flush`` returns the one still pending at
    end of stream (a last event without its blank line is dispatched rather than lost).
    """

    __slots__ = ("_buffer", "_data", "_event", "_first", "_trailing_cr")

    def __init__(self) -> None:
        self._buffer = b""
        self._trailing_cr = False
        self._first = True
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        if self._trailing_cr:
            # A CR ended the previous chunk: a LF opening this one belongs to it (CRLF).
            self._trailing_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\r" in chunk:
            if chunk.endswith(b"\r"):
                self._trailing_cr = True
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n" not in chunk:
            self._buffer += chunk
            return []
        lines = (self._buffer + chunk).split(b"\n")
        self._buffer = lines.pop()
        events: list[ServerSentEvent] = []
        for raw in lines:
            event = self._line(raw)
            if event is not None:
                events.append(event)
        return events

    def flush(self) -> ServerSentEvent | None:
        if self._buffer:
            raw, self._buffer = self._buffer, b""
            event = self._line(raw)
            if event is not None:
                return event
        return self._dispatch()

    def _line(self, raw: bytes) -> ServerSentEvent | None:
        line = raw.decode("utf-8", "replace")
        if self._first:
            self._first = False
            if line.startswith("\ufeff"):
                line = line[1:]
        if not line:
            return self._dispatch()
        if line.startswith("data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(" ") else value)
            return None
        if line[0] == ":":
            return None  # a comment: keep-alive pings
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":  # "data" without a colon: an empty data line
            self._data.append(value)
        # id and retry only matter to a reconnecting EventSource; other fields are ignored.
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        if not self._data:
            self._event = ""
            return None
        event = ServerSentEvent(self._event, "\n".join(self._data))
        self._event = ""
        self._data = []
        return event


async def iter_sse(chunks: AsyncIterator[bytes]) -> AsyncGenerator[ServerSentEvent, None]:
    """The events of a byte stream (no abort handling: for tests and benchmarks)."""
    decoder = SSEDecoder()
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
    last = decoder.flush()
    if last is not None:
        yield last


# --------------------------------------------------------------------------- abort guard


class Aborted(Exception):
    """The request's signal fired while (or before) awaiting HTTP I/O."""


class AbortGuard:
    """Runs one awaitable at a time under a cancel scope that the signal cancels.

    Create it inside the event loop.  The signal may fire from any thread: the cancellation is
    then handed to the loop thread.  ``close()`` unregisters from the signal.
    """

    __slots__ = ("_native", "_remove", "_scope", "_signal", "_thread")

    def __init__(self, signal: AbortSignal) -> None:
        self._signal = signal
        self._scope: anyio.CancelScope | None = None
        self._native: Any = anyio.lowlevel.current_token().native_token
        self._thread = threading.get_ident()
        self._remove = signal.add_callback(self._fire)

    @property
    def aborted(self) -> bool:
        return self._signal.aborted

    def close(self) -> None:
        self._remove()

    def _cancel(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    def _fire(self) -> None:
        if threading.get_ident() == self._thread:
            self._cancel()
            return
        try:
            if hasattr(self._native, "call_soon_threadsafe"):
                self._native.call_soon_threadsafe(self._cancel)
            else:  # trio
                self._native.run_sync_soon(self._cancel)
        except RuntimeError:
            pass  # the loop is gone: nothing is awaiting any more

    async def __call__(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable``; raise ``Aborted`` if the signal has fired or fires meanwhile."""
        if self._signal.aborted:
            if isinstance(awaitable, Coroutine):
                awaitable.close()
            raise Aborted
        with anyio.CancelScope() as scope:
            self._scope = scope
            try:
                return await awaitable
            finally:
                self._scope = None
        raise Aborted


# --------------------------------------------------------------------------- segments


class _Stamp:
    """``now_iso()`` computed at most once per millisecond: a burst of deltas shares one
    timestamp string instead of formatting the same instant thousands of times."""

    __slots__ = ("_ms", "_text")

    def __init__(self) -> None:
        self._ms = -1
        self._text = ""

    def __call__(self) -> str:
        ms = int(time.time() * 1000)
        if ms != self._ms:
            self._text = now_iso()
            self._ms = ms
        return self._text


stamp = _Stamp()


def arguments_problem(arguments: str) -> str | None:
    """Why finished tool-call arguments are unusable (not JSON: usually truncated), or None."""
    try:
        msgspec.json.decode(arguments)
    except msgspec.DecodeError as exc:
        return str(exc)
    return None


# --------------------------------------------------------------------------- the driver


class EventParser(Protocol):
    """A provider's stream parser: fed events, it appends messages to ``out``."""

    out: list[OmniMessage]
    terminator: str

    def feed(self, event: ServerSentEvent) -> LLMOutcome | bool | None:
        """``None`` to go on, ``DONE`` at the terminator, or a failure outcome (open segments
        already closed with its status)."""
        ...

    def close(self, status: StopReason) -> None:
        """Close every open segment with ``status`` (R-STREAM-4)."""
        ...

    def finish(self) -> LLMOutcome:
        """After the terminator: settle what is open, append usage, return the outcome."""
        ...


class _Events:
    """Events off a response.  Only ``fill`` does I/O (one guarded await per network chunk,
    not per event); ``next`` hands out what a chunk already held."""

    __slots__ = ("_chunks", "_decoder", "_eof", "_pending")

    def __init__(self, response: httpx.Response) -> None:
        self._chunks = response.aiter_bytes()
        self._decoder = SSEDecoder()
        self._pending: deque[ServerSentEvent] = deque()
        self._eof = False

    def next(self) -> ServerSentEvent | None:
        return self._pending.popleft() if self._pending else None

    async def fill(self) -> bool:
        """Read until an event is ready; False at the end of the body with none left."""
        pending = self._pending
        while not pending:
            if self._eof:
                return False
            try:
                chunk = await anext(self._chunks)
            except StopAsyncIteration:
                self._eof = True
                last = self._decoder.flush()
                if last is not None:
                    pending.append(last)
                return bool(pending)
            pending.extend(self._decoder.feed(chunk))
        return True

    async def drain(self) -> None:
        while not self._eof:
            try:
                await anext(self._chunks)
            except StopAsyncIteration:
                self._eof = True

    async def aclose(self) -> None:
        close = getattr(self._chunks, "aclose", None)
        if close is not None:
            await close()


async def _read_limited(response: httpx.Response) -> bytes:
    buf = bytearray()
    try:
        async for chunk in response.aiter_bytes():
            buf += chunk
            if len(buf) >= _ERROR_BODY_LIMIT:
                break
    except httpx.HTTPError:
        pass  # what arrived is still the best description of the failure
    return bytes(buf[:_ERROR_BODY_LIMIT])


def _emit(parser: EventParser) -> list[OmniMessage]:
    out = parser.out
    parser.out = []
    return out


async def run_sse(
    *,
    client: httpx.AsyncClient,
    build: Callable[[], httpx.Request],
    signal: AbortSignal,
    parser: EventParser,
    provider: str,
    secret: str | None,
) -> AsyncGenerator[OmniMessage | LLMOutcome, None]:
    """Send the request and translate its event stream; the last item is the ``LLMOutcome``.

    Never raises (R-MSG-24) except cancellation, which is always re-raised.  An abort through
    ``signal`` cancels the HTTP I/O in flight, closes the open segments with ``aborted`` and
    ends with an ``aborted`` outcome.  The response is closed on every path.
    """
    guard = AbortGuard(signal)
    response: httpx.Response | None = None
    events: _Events | None = None
    try:
        opened = await _open(client, build, guard, provider, secret)
        if isinstance(opened, LLMOutcome):
            yield opened
            return
        response, refused = opened
        if refused is not None:
            yield refused
            return
        events = _Events(response)
        while True:
            event = await _next_event(events, guard, provider, secret, parser.terminator)
            if isinstance(event, LLMOutcome):
                parser.close(event.status)
                for msg in _emit(parser):
                    yield msg
                yield event
                return
            try:
                step = parser.feed(event)
            except Exception as exc:  # a parser bug must not escape as an exception either
                step = _parser_failure(parser, provider, exc)
            if parser.out:
                for msg in _emit(parser):
                    yield msg
            if step is None:
                continue
            if isinstance(step, LLMOutcome):
                yield _redacted(step, secret)
                return
            # The terminator: read to the end of the body (so the connection can be reused)
            # before reporting usage, which R-RUN-16 allows only after a clean finish.
            with anyio.move_on_after(_DRAIN_S):
                try:
                    await guard(events.drain())
                except Exception:
                    pass  # the answer is complete; a hiccup after it changes nothing
            outcome = parser.finish()
            for msg in _emit(parser):
                yield msg
            yield _redacted(outcome, secret)
            return
    finally:
        guard.close()
        with anyio.CancelScope(shield=True):
            for closable in (events, response):
                if closable is not None:
                    try:
                        await closable.aclose()
                    except Exception:
                        pass


async def _next_event(
    events: _Events, guard: AbortGuard, provider: str, secret: str | None, terminator: str
) -> ServerSentEvent | LLMOutcome:
    """The next event, or the failure that ends the stream: the body ended before the
    terminator, a read error, or an abort (also one that fired while the consumer held a
    message we yielded)."""
    while True:
        event = events.next()
        if event is not None:
            return LLMOutcome("aborted") if guard.aborted else event
        try:
            if not await guard(events.fill()):
                return LLMOutcome("timeout", f"{provider}: stream ended before {terminator}")
        except Aborted:
            return LLMOutcome("aborted")
        except Exception as exc:
            return transport_outcome(provider, exc, secret=secret)


async def _open(
    client: httpx.AsyncClient,
    build: Callable[[], httpx.Request],
    guard: AbortGuard,
    provider: str,
    secret: str | None,
) -> LLMOutcome | tuple[httpx.Response, LLMOutcome | None]:
    """Send the request: the response with ``None`` when it is an event stream to read, the
    response with the outcome that ends the call when it is not (an error status or a JSON
    body), or the outcome alone when there is no response (the caller closes a response)."""
    try:
        http_request = build()
    except Exception as exc:
        message = redact(f"{provider}: cannot build the request: {exc}", secret)
        return LLMOutcome("failed", message, permanent=True)
    try:
        response = await guard(client.send(http_request, stream=True))
    except Aborted:
        return LLMOutcome("aborted")
    except Exception as exc:
        return transport_outcome(provider, exc, secret=secret)
    content_type = response.headers.get("content-type", "")
    error_status = not 200 <= response.status_code < 300
    if not error_status and not content_type.startswith("application/json"):
        return response, None
    try:
        body = await guard(_read_limited(response))
    except Aborted:
        return response, LLMOutcome("aborted")
    if error_status:
        return response, http_outcome(provider, response, body, secret=secret)
    message = f"{provider}: expected an event stream, got {content_type}: {error_text(body)}"
    return response, LLMOutcome("malformed", redact(message, secret))


def display_url(url: str) -> str:
    """``url`` for a repr: without user info (which may hold credentials)."""
    try:
        parsed = httpx.URL(url)
    except Exception:
        return "<invalid URL>"
    if parsed.userinfo:
        parsed = parsed.copy_with(username=None, password=None)
    return str(parsed)


async def single_outcome(outcome: LLMOutcome) -> AsyncGenerator[OmniMessage | LLMOutcome, None]:
    """A stream that is nothing but its outcome."""
    yield outcome


def _parser_failure(parser: EventParser, provider: str, exc: Exception) -> LLMOutcome:
    try:
        parser.close("malformed")
    except Exception:
        parser.out = []
    return LLMOutcome("malformed", f"{provider}: cannot parse the stream: {exc!r}")


def _redacted(outcome: LLMOutcome, secret: str | None) -> LLMOutcome:
    if outcome.message is None or not secret or secret not in outcome.message:
        return outcome
    return LLMOutcome(
        outcome.status,
        redact(outcome.message, secret),
        permanent=outcome.permanent,
        retry_after_s=outcome.retry_after_s,
    )
