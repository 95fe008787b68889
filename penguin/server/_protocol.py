"""The HTTP protocol under uvicorn, with a header timeout (issue 29).

Owns: closing a connection whose request headers do not arrive in time (a slow or stalled
client must not hold a connection open forever: uvicorn times out only idle keep-alive
connections, and only until their first byte) and the uvicorn ``Config`` the server and its
tests share.  Does not: time out bodies (``_bodies.read_raw`` does, per read).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HEADER_TIMEOUT_S", "uvicorn_config"]

HEADER_TIMEOUT_S: Final = 10.0
log = logging.getLogger("penguin.server")


class _TimedH11(H11Protocol):
    """h11 with a deadline for each request's headers, from the connection (or the end of the
    previous response) to the end of the header block."""

    header_timeout: float = HEADER_TIMEOUT_S
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:
            self._disarm()  # the headers are in: the body has its own timeout

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm()  # the next request on this connection gets its own deadline

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_timeout, self._timed_out)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _timed_out(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        log.debug("closing a connection whose request headers took over %ss", self.header_timeout)
        self.transport.close()


def protocol_class(header_timeout: float = HEADER_TIMEOUT_S) -> type[H11Protocol]:
    return type("TimedH11", (_TimedH11,), {"header_timeout": header_timeout})


def uvicorn_config(
    app: Any,
    *,
    host: str,
    port: int,
    header_timeout: float = HEADER_TIMEOUT_S,
    **options: Any,
) -> uvicorn.Config:
    """The ``Config`` of ``penguin serve`` (the tests serve through it too)."""
    return uvicorn.Config(app, host=host, port=port, http=protocol_class(header_timeout), **options)
