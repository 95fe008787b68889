"""Server-Sent Events responses (R-SRV-7/8/9).

Owns: one subscriber's response: the replay (from the buffer, or records read from the trace
then the buffered tail and ``resync_required``), the snapshot, then live events with a comment
heartbeat every 15 s; the subscription ends with the connection.  Does not: decide the replay
(``Channel.subscribe``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ._channel import Channel, Subscriber

__all__ = ["SSEResponse"]

HEARTBEAT_S: Final = 15.0
_HEADERS: Final = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
    (b"x-content-type-options", b"nosniff"),
]


class SSEResponse(Response):
    """``prelude`` produces what the subscriber missed plus the snapshot, as wire bytes.
    (A ``Response`` only for the route's type; it speaks ASGI itself.)"""

    def __init__(
        self,
        channel: Channel,
        sub: Subscriber,
        prelude: Callable[[], Awaitable[list[bytes]]],
        *,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self.status_code = 200
        self.background = None
        self._channel = channel
        self._sub = sub
        self._prelude = prelude
        self._heartbeat = heartbeat_s
        self._last_write = 0.0  # set when the response starts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
            self._last_write = anyio.current_time()
            ended = False
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watch, receive, tg.cancel_scope)
                tg.start_soon(self._beat)
                await self._pump(send)
                ended = True
                tg.cancel_scope.cancel()
            if ended:
                # The stream ended on the server's side (SIGTERM, the channel closed, a slow
                # client dropped): finish the chunked body so the client sees a clean end, not
                # a broken response (issue 29).
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away mid-write
        finally:
            self._channel.unsubscribe(self._sub)

    async def _watch(self, receive: Receive, scope: anyio.CancelScope) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                scope.cancel()
                return

    async def _beat(self) -> None:
        """A comment once nothing was written for a heartbeat period (one timer per
        connection, not one per wait)."""
        while True:
            wait = self._last_write + self._heartbeat - anyio.current_time()
            if wait > 0:
                await anyio.sleep(wait)
                continue
            self._last_write = anyio.current_time()
            self._sub.put(b": heartbeat\n\n")

    async def _pump(self, send: Send) -> None:
        body = b"".join(await self._prelude())
        await _chunk(send, body or b": connected\n\n")
        sub = self._sub
        while True:
            await sub.wait()
            if not sub.pending:
                return  # dropped (too slow) or closed: the client reconnects
            # No waiting for more: the engine publishes a session's burst (a turn's stream) in
            # one step, so one write already carries it, and under load whatever the other
            # sessions published in the same loop pass; a wait only added a pass to every
            # event's latency (issue 19).
            self._last_write = anyio.current_time()
            await _chunk(send, sub.take())


async def _chunk(send: Send, body: bytes) -> None:
    message: dict[str, Any] = {"type": "http.response.body", "body": body, "more_body": True}
    await send(message)
