"""Streamed segments of one producer (SPEC §3).

Owns: tracking which segments an LLM stream has opened and not closed, and producing the
missing ``stop`` fragment and complete message when the stream ends anyway (R-STREAM-4); the
wrapper that lets any async iterator be closed with ``aclosing``.  Does not: record or push
anything (the session does).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from eventstore import OmniMessage
from eventstore import builders as b
from eventstore.builders import payload_type

__all__ = ["Segments", "as_agen"]


async def as_agen(iterable: AsyncIterator[Any]) -> AsyncGenerator[Any, None]:
    """Wrap any async iterator (an LLM's or an environment's stream) in an async generator, so
    ``aclosing`` can always close it, whatever the implementation returned.  Closing the
    wrapper closes the wrapped generator at once (its cleanup — an HTTP response, a child
    process — must not wait for the garbage collector)."""
    try:
        async for item in iterable:
            yield item
    finally:
        aclose = getattr(iterable, "aclose", None)
        if aclose is not None:
            await aclose()


class Segments:
    """Open streamed segments of one producer, so an interrupted stream can be closed
    (R-STREAM-4): the engine emits the missing ``stop`` and complete message."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], list[Any]] = {}

    def feed(self, msg: OmniMessage) -> None:
        if msg.origin is not None:
            return
        p = msg.payload
        key = (payload_type(msg) or "", str(getattr(p, "tool_call_id", "")))
        event = getattr(p, "event_type", None)
        if event == "start":
            self._open[key] = [p]
        elif event == "stop":
            self._open.pop(key, None)
        elif key in self._open:
            self._open[key].append(p)
        else:
            self._open[key] = [p]

    def close_for(self, msg: OmniMessage) -> None:
        """A complete message settles the producer's open segment of the same kind."""
        p = msg.payload
        kind = {
            "text": "partial_text",
            "thinking": "partial_thinking",
            "tool_call": "partial_tool_call",
        }.get(payload_type(msg) or "")
        if kind is not None:
            self._open.pop((kind, str(getattr(p, "tool_call_id", ""))), None)

    @property
    def open(self) -> bool:
        return bool(self._open)

    def close_all(self, status: str) -> list[OmniMessage]:
        out: list[OmniMessage] = []
        reason = status
        for (kind, cid), parts in self._open.items():
            sr: Any = reason
            if kind == "partial_text":
                body = "".join(getattr(x, "text", "") for x in parts)
                out.append(b.partial_text("stop", stop_reason=sr))
                out.append(b.assistant_text(body, stop_reason=sr))
            elif kind == "partial_thinking":
                body = "".join(getattr(x, "thinking", "") for x in parts)
                out.append(b.partial_thinking("stop", stop_reason=sr))
                out.append(b.thinking(body, stop_reason=sr))
            elif kind == "partial_tool_call":
                name = next((x.name for x in reversed(parts) if x.name), "")
                args = "".join(x.arguments for x in parts)
                out.append(b.partial_tool_call("stop", cid, stop_reason=sr))
                out.append(b.tool_call(name, args, cid, stop_reason=sr))
        self._open.clear()
        return out
