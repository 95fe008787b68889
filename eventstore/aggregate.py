"""The partial aggregator (SPEC §3, R-AGG-1..6).

Owns: folding streamed ``partial_*`` fragments back into complete model messages for consumers
that only see the merged stream (renderers, tests, tools reading a live stream).  Does not:
produce fragments, check that a producer kept the streaming discipline (R-STREAM-1..4), or write
anything: partials are never recorded (R-STREAM-6).

    agg = PartialAggregator()
    for msg in stream:
        for complete in agg.feed(msg):
            show(complete)
    for complete in agg.flush():
        show(complete)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from . import builders
from ._schema import (
    OmniMessage,
    PartialTextPayload,
    PartialThinkingPayload,
    PartialToolCallOutputPayload,
    PartialToolCallPayload,
    StopReason,
)

__all__ = ["PartialAggregator"]

_Partial = (
    PartialTextPayload
    | PartialThinkingPayload
    | PartialToolCallPayload
    | PartialToolCallOutputPayload
)
_PARTIALS = (
    PartialTextPayload,
    PartialThinkingPayload,
    PartialToolCallPayload,
    PartialToolCallOutputPayload,
)


@dataclass
class _Fragment:
    """One open segment: the content so far and the last values of its sticky fields."""

    kind: type[_Partial]
    tool_call_id: str
    parts: list[str] = field(default_factory=list)
    name: str = ""
    images: list[str] | None = None
    stop_reason: StopReason = "completed"
    timestamp: str = ""
    origin: list[str] | None = None

    def add(self, msg: OmniMessage, payload: _Partial) -> None:
        if isinstance(payload, PartialTextPayload):
            self.parts.append(payload.text)
        elif isinstance(payload, PartialThinkingPayload):
            self.parts.append(payload.thinking)
        elif isinstance(payload, PartialToolCallPayload):
            self.parts.append(payload.arguments)
            if payload.name:  # R-STREAM-3: the last non-empty name wins
                self.name = payload.name
        else:
            self.parts.append(payload.output)
            if payload.images:  # R-AGG-4: the last non-empty list wins, never concatenated
                self.images = list(payload.images)
        # R-AGG-4 / R-MSG-14: the last stop_reason seen; an absent one reads as completed.
        self.stop_reason = payload.stop_reason or "completed"
        self.timestamp = msg.timestamp
        self.origin = msg.origin

    def complete(self) -> OmniMessage:
        """R-AGG-5: the complete message this segment stands for."""
        body = "".join(self.parts)
        ts = self.timestamp
        msg: OmniMessage
        if self.kind is PartialTextPayload:
            msg = builders.assistant_text(body, stop_reason=self.stop_reason, timestamp=ts)
        elif self.kind is PartialThinkingPayload:
            msg = builders.thinking(body, stop_reason=self.stop_reason, timestamp=ts)
        elif self.kind is PartialToolCallPayload:
            msg = builders.tool_call(
                self.name, body, self.tool_call_id, stop_reason=self.stop_reason, timestamp=ts
            )
        else:
            msg = builders.tool_call_output(
                self.tool_call_id,
                body,
                stop_reason=self.stop_reason,
                images=self.images or None,
                timestamp=ts,
            )
        if self.origin:
            # A forwarded child segment stays attributed to its child (R-MSG-4).
            msg = msgspec.structs.replace(msg, origin=list(self.origin))
        return msg


class PartialAggregator:
    """Folds ``partial_*`` fragments into complete messages (R-AGG-1..6).

    ``feed(msg)`` returns what to emit now, in order: the message itself when it is not a
    partial (R-AGG-1), the complete message when a fragment closes a segment (``stop``, or a
    ``start`` that re-opens a key still open, R-AGG-3), or nothing.  Fragments are keyed by
    ``(payload type, tool_call_id or "")`` (R-AGG-2); a ``delta``/``stop`` with no open segment
    opens one (R-AGG-4).  ``flush()`` closes every open segment, oldest first (R-AGG-6).

    The complete message is built with the builders and carries the timestamp and ``origin``
    of the segment's last fragment.
    """

    def __init__(self) -> None:
        # Insertion order is opening order (R-AGG-6); a re-opened key moves to the end.
        self._open: dict[tuple[type[_Partial], str], _Fragment] = {}

    @property
    def open_count(self) -> int:
        """How many segments are open (not yet closed by ``stop`` or ``flush``)."""
        return len(self._open)

    def feed(self, msg: OmniMessage) -> list[OmniMessage]:
        payload = msg.payload
        if not isinstance(payload, _PARTIALS):
            return [msg]
        tool_call_id = getattr(payload, "tool_call_id", "")
        key = (type(payload), tool_call_id)
        out: list[OmniMessage] = []
        fragment = self._open.get(key)
        if payload.event_type == "start" and fragment is not None:
            del self._open[key]
            out.append(fragment.complete())
            fragment = None
        if fragment is None:
            fragment = _Fragment(type(payload), tool_call_id)
            self._open[key] = fragment
        fragment.add(msg, payload)
        if payload.event_type == "stop":
            del self._open[key]
            out.append(fragment.complete())
        return out

    def flush(self) -> list[OmniMessage]:
        out = [fragment.complete() for fragment in self._open.values()]
        self._open.clear()
        return out
