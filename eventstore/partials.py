"""Streamed segments: the one implementation of ``partial_*`` start/delta/stop (SPEC §3).

Owns: producing a segment's fragments and its complete message (``SegmentWriter``,
R-STREAM-1/2), reading fragments back — a uniform typed view of one fragment (``fragment``),
the aggregator that folds fragments into complete messages (``PartialAggregator``, R-AGG-1..6)
and closes what a stream left open (R-STREAM-4), and the open segments of a merged stream as
start fragments holding their content so far (``OpenSegments``, R-SRV-6).  Does not: check
that a producer kept the streaming discipline (the validator does), or write anything:
partials are never recorded (R-STREAM-6).

    seg = SegmentWriter("text")            # a producer
    out = [seg.start(), seg.delta("Hel"), seg.delta("lo"), *seg.stop("completed")]

    agg = PartialAggregator()              # a consumer of the merged stream
    for msg in stream:
        for complete in agg.feed(msg):
            show(complete)
    for complete in agg.flush():
        show(complete)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

import msgspec

from . import builders
from ._schema import (
    OmniMessage,
    PartialTextPayload,
    PartialThinkingPayload,
    PartialToolCallOutputPayload,
    PartialToolCallPayload,
    StopReason,
    TextPayload,
    ThinkingPayload,
    ToolCallOutputPayload,
    ToolCallPayload,
)

__all__ = [
    "Fragment",
    "OpenSegments",
    "PartialAggregator",
    "SegmentKind",
    "SegmentWriter",
    "fragment",
    "segment_kind",
]

SegmentKind: TypeAlias = Literal["text", "thinking", "tool_call", "tool_call_output"]
"""What a segment streams; its fragments are ``partial_<kind>``, its complete message ``<kind>``."""

EventType: TypeAlias = Literal["start", "delta", "stop"]

_KIND_OF_PARTIAL: Final[dict[type[Any], SegmentKind]] = {
    PartialTextPayload: "text",
    PartialThinkingPayload: "thinking",
    PartialToolCallPayload: "tool_call",
    PartialToolCallOutputPayload: "tool_call_output",
}
_KIND_OF_COMPLETE: Final[dict[type[Any], SegmentKind]] = {
    TextPayload: "text",
    ThinkingPayload: "thinking",
    ToolCallPayload: "tool_call",
    ToolCallOutputPayload: "tool_call_output",
}


@dataclass(frozen=True, slots=True)
class Fragment:
    """One ``partial_*`` fragment seen uniformly: ``content`` is its text, thinking, arguments
    or output increment; ``name`` (tool calls) and ``images`` (tool outputs) are empty when the
    kind has none."""

    kind: SegmentKind
    event: EventType
    tool_call_id: str
    content: str
    name: str
    images: list[str] | None
    stop_reason: StopReason | None


def fragment(msg: OmniMessage) -> Fragment | None:
    """The fragment ``msg`` carries, or ``None`` when it is no partial."""
    p = msg.payload
    if isinstance(p, PartialTextPayload):
        return Fragment("text", p.event_type, "", p.text, "", None, p.stop_reason)
    if isinstance(p, PartialThinkingPayload):
        return Fragment("thinking", p.event_type, "", p.thinking, "", None, p.stop_reason)
    if isinstance(p, PartialToolCallPayload):
        return Fragment(
            "tool_call", p.event_type, p.tool_call_id, p.arguments, p.name, None, p.stop_reason
        )
    if isinstance(p, PartialToolCallOutputPayload):
        return Fragment(
            "tool_call_output", p.event_type, p.tool_call_id, p.output, "", p.images, p.stop_reason
        )
    return None


def segment_kind(msg: OmniMessage) -> SegmentKind | None:
    """The segment kind of a fragment or of a complete message (``None`` for anything else,
    e.g. a user's text is a ``text`` too: the caller decides whose messages it asks about)."""
    kind = type(msg.payload)
    return _KIND_OF_PARTIAL.get(kind) or _KIND_OF_COMPLETE.get(kind)


# --------------------------------------------------------------------------- producing


class SegmentWriter:
    """One streamed segment of ``kind``, produced fragment by fragment (R-STREAM-1/2).

    ``start()`` gives the start fragment; ``delta(piece)`` one increment; ``stop(reason)`` the
    stop fragment followed by the complete message, whose content is the concatenated
    increments.  ``clock`` stamps every message (default: the builders' current time).
    """

    __slots__ = (
        "_clock",
        "_parts",
        "fidelity",
        "images",
        "kind",
        "name",
        "origin",
        "tool_call_id",
    )

    def __init__(
        self,
        kind: SegmentKind,
        *,
        tool_call_id: str = "",
        name: str = "",
        fidelity: dict[str, Any] | None = None,
        clock: Callable[[], str] | None = None,
    ) -> None:
        self.kind: SegmentKind = kind
        self.tool_call_id = tool_call_id
        self.name = name
        self.fidelity = fidelity
        self.images: list[str] | None = None
        self.origin: list[str] | None = None
        self._parts: list[str] = []
        self._clock = clock

    @property
    def has_deltas(self) -> bool:
        """Whether any increment was produced (even an empty one)."""
        return bool(self._parts)

    @property
    def body(self) -> str:
        """The content streamed so far."""
        return "".join(self._parts)

    def _ts(self) -> str | None:
        return self._clock() if self._clock is not None else None

    def start(self) -> OmniMessage:
        return self._fragment("start", "", name=self.name)

    def delta(
        self, piece: str, *, name: str = "", images: Iterable[str] | None = None
    ) -> OmniMessage:
        """One increment; ``name`` updates a tool call's name (R-STREAM-3), ``images`` ride on a
        tool output's delta (the last non-empty list wins, R-AGG-4)."""
        self._take(piece, name, images)
        return self._fragment("delta", piece, name=name, images=images)

    def _take(self, piece: str, name: str, images: Iterable[str] | None) -> None:
        """What ``delta`` keeps of an increment, without building its fragment."""
        self._parts.append(piece)
        if name:
            self.name = name
        if images:
            self.images = list(images)

    def stop(
        self, stop_reason: StopReason, *, fidelity: dict[str, Any] | None = None
    ) -> tuple[OmniMessage, OmniMessage]:
        """The stop fragment and the complete message (R-STREAM-2); ``fidelity`` merges into
        the segment's."""
        if fidelity:
            self.fidelity = {**(self.fidelity or {}), **fidelity}
        # One instant for both: the complete message is what the stop fragment closed.
        ts = self._ts() or builders.now_iso()
        stop = self._fragment("stop", "", stop_reason=stop_reason, timestamp=ts)
        return stop, self.complete(stop_reason, timestamp=ts)

    def complete(self, stop_reason: StopReason, *, timestamp: str | None = None) -> OmniMessage:
        """The complete message this segment stands for (R-AGG-5)."""
        body = self.body
        msg: OmniMessage
        if self.kind == "text":
            msg = builders.assistant_text(
                body, stop_reason=stop_reason, fidelity=self.fidelity, timestamp=timestamp
            )
        elif self.kind == "thinking":
            msg = builders.thinking(
                body, stop_reason=stop_reason, fidelity=self.fidelity, timestamp=timestamp
            )
        elif self.kind == "tool_call":
            msg = builders.tool_call(
                self.name,
                body,
                self.tool_call_id,
                stop_reason=stop_reason,
                fidelity=self.fidelity,
                timestamp=timestamp,
            )
        else:
            msg = builders.tool_call_output(
                self.tool_call_id,
                body,
                stop_reason=stop_reason,
                images=self.images or None,
                timestamp=timestamp,
            )
        if self.origin:
            # A forwarded child segment stays attributed to its child (R-MSG-4).
            msg = msgspec.structs.replace(msg, origin=list(self.origin))
        return msg

    def _fragment(
        self,
        event: EventType,
        piece: str,
        *,
        name: str = "",
        images: Iterable[str] | None = None,
        stop_reason: StopReason = "completed",
        timestamp: str | None = None,
    ) -> OmniMessage:
        ts = timestamp if timestamp is not None else self._ts()
        if self.kind == "text":
            return builders.partial_text(event, piece, stop_reason=stop_reason, timestamp=ts)
        if self.kind == "thinking":
            return builders.partial_thinking(event, piece, stop_reason=stop_reason, timestamp=ts)
        if self.kind == "tool_call":
            return builders.partial_tool_call(
                event,
                self.tool_call_id,
                name=name,
                arguments=piece,
                stop_reason=stop_reason,
                timestamp=ts,
            )
        return builders.partial_tool_call_output(
            event, self.tool_call_id, piece, images=images, stop_reason=stop_reason, timestamp=ts
        )


# --------------------------------------------------------------------------- reading

_Read: TypeAlias = tuple[SegmentKind, str, str, str, "list[str] | None"]
# ``fragment``'s fields (kind, tool_call_id, content, name, images) per exact partial type.
_READ_FRAGMENT: Final[dict[type[Any], Callable[[Any], _Read]]] = {
    PartialTextPayload: lambda p: ("text", "", p.text, "", None),
    PartialThinkingPayload: lambda p: ("thinking", "", p.thinking, "", None),
    PartialToolCallPayload: lambda p: ("tool_call", p.tool_call_id, p.arguments, p.name, None),
    PartialToolCallOutputPayload: lambda p: (
        "tool_call_output",
        p.tool_call_id,
        p.output,
        "",
        p.images,
    ),
}


def _call_id(payload: Any) -> str:
    """The ``tool_call_id`` of a complete message, ``""`` for a kind that has none."""
    if isinstance(payload, ToolCallPayload | ToolCallOutputPayload):
        return payload.tool_call_id
    return ""


class _Open:
    """A segment being read back: the writer holding its content, plus its sticky fields."""

    __slots__ = ("segment", "stop_reason", "timestamp")

    def __init__(self, kind: SegmentKind, tool_call_id: str) -> None:
        self.segment = SegmentWriter(kind, tool_call_id=tool_call_id)
        self.stop_reason: StopReason = "completed"
        self.timestamp = ""

    def add(
        self,
        msg: OmniMessage,
        content: str,
        name: str,
        images: list[str] | None,
        stop_reason: StopReason | None,
    ) -> None:
        # The segment keeps the increment; the fragment ``delta`` would build is not needed.
        self.segment._take(content, name, images)
        # R-AGG-4 / R-MSG-14: the last stop_reason seen; an absent one reads as completed.
        self.stop_reason = stop_reason or "completed"
        self.timestamp = msg.timestamp
        self.segment.origin = msg.origin

    def complete(self) -> OmniMessage:
        return self.segment.complete(self.stop_reason, timestamp=self.timestamp)


class PartialAggregator:
    """Folds ``partial_*`` fragments into complete messages (R-AGG-1..6).

    ``feed(msg)`` returns what to emit now, in order: the message itself when it is not a
    partial (R-AGG-1), the complete message when a fragment closes a segment (``stop``, or a
    ``start`` that re-opens a key still open, R-AGG-3), or nothing.  Fragments are keyed by
    ``(kind, tool_call_id or "")`` (R-AGG-2); a ``delta``/``stop`` with no open segment opens
    one (R-AGG-4).  ``flush()`` closes every open segment, oldest first (R-AGG-6).

    The complete message is built by ``SegmentWriter.complete`` and carries the timestamp and
    ``origin`` of the segment's last fragment.

    A producer whose stream ends with segments still open closes them with
    ``close_open(reason)`` (R-STREAM-4): a stop fragment and a complete message each;
    ``settle(complete)`` forgets the open segment a complete message has already closed.
    """

    def __init__(self) -> None:
        # Insertion order is opening order (R-AGG-6); a re-opened key moves to the end.
        self._open: dict[tuple[SegmentKind, str], _Open] = {}

    @property
    def open_count(self) -> int:
        """How many segments are open (not yet closed by ``stop`` or ``flush``)."""
        return len(self._open)

    def feed(self, msg: OmniMessage) -> list[OmniMessage]:
        p: Any = msg.payload
        read = _READ_FRAGMENT.get(type(p))
        if read is not None:
            # The engine feeds every streamed fragment: read it without building a ``Fragment``.
            kind, call_id, content, name, images = read(p)
            event, stop_reason = p.event_type, p.stop_reason
        else:
            frag = fragment(msg)
            if frag is None:
                return [msg]
            kind, call_id, content, name, images = (
                frag.kind,
                frag.tool_call_id,
                frag.content,
                frag.name,
                frag.images,
            )
            event, stop_reason = frag.event, frag.stop_reason
        key = (kind, call_id)
        out: list[OmniMessage] = []
        seg = self._open.get(key)
        if event == "start" and seg is not None:
            del self._open[key]
            out.append(seg.complete())
            seg = None
        if seg is None:
            seg = self._open[key] = _Open(kind, call_id)
        seg.add(msg, content, name, images, stop_reason)
        if event == "stop":
            del self._open[key]
            out.append(seg.complete())
        return out

    def flush(self) -> list[OmniMessage]:
        out = [seg.complete() for seg in self._open.values()]
        self._open.clear()
        return out

    def settle(self, msg: OmniMessage) -> None:
        """A complete model message closes the open segment of its kind and call id."""
        p = msg.payload
        kind = _KIND_OF_COMPLETE.get(type(p))
        if kind is not None:
            self._open.pop((kind, _call_id(p)), None)

    def close_open(self, stop_reason: StopReason) -> list[OmniMessage]:
        """R-STREAM-4: the missing stop fragment and complete message of every open segment,
        oldest first, all with ``stop_reason``."""
        out: list[OmniMessage] = []
        for seg in self._open.values():
            out.extend(seg.segment.stop(stop_reason))
        self._open.clear()
        return out


# --------------------------------------------------------------------------- open segments

_SegmentKey: TypeAlias = tuple[tuple[str, ...], SegmentKind, str]


class _Live:
    """An open segment as a late reader needs it: its first fragment and the content so far."""

    __slots__ = ("first", "segment")

    def __init__(self, first: OmniMessage, kind: SegmentKind, tool_call_id: str) -> None:
        self.first = first
        self.segment = SegmentWriter(kind, tool_call_id=tool_call_id)

    def snapshot(self) -> OmniMessage:
        p = self.first.payload
        seg = self.segment
        body = seg.body
        payload: Any
        if isinstance(p, PartialTextPayload):
            payload = msgspec.structs.replace(p, event_type="start", text=body)
        elif isinstance(p, PartialThinkingPayload):
            payload = msgspec.structs.replace(p, event_type="start", thinking=body)
        elif isinstance(p, PartialToolCallPayload):
            payload = msgspec.structs.replace(p, event_type="start", arguments=body, name=seg.name)
        else:
            assert isinstance(p, PartialToolCallOutputPayload)
            payload = msgspec.structs.replace(
                p, event_type="start", output=body, images=list(seg.images) if seg.images else None
            )
        return msgspec.structs.replace(self.first, payload=payload)


class OpenSegments:
    """The segments still open in a merged stream (the run's own and its children's), each
    readable as one synthetic ``start`` fragment holding the content so far (R-SRV-6).

    ``feed(msg)`` takes every streamed message (anything but a fragment is ignored); segments
    are keyed by ``(origin, kind, tool_call_id or "")`` — the aggregator's key (R-AGG-2) per
    origin, since children's segments interleave with the parent's.  Content accumulates as
    the aggregator's does (R-AGG-3/4: a ``start`` re-opens, the last non-empty ``name`` and
    ``images`` win); a ``stop`` closes.  ``settle(complete)`` closes the segment a complete
    message stands for; ``snapshots()`` gives the start fragments, oldest first, each with
    its first fragment's timestamp and origin.
    """

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[_SegmentKey, _Live] = {}

    def __len__(self) -> int:
        return len(self._open)

    def feed(self, msg: OmniMessage) -> None:
        p: Any = msg.payload
        read = _READ_FRAGMENT.get(type(p))
        if read is None:
            return
        kind, call_id, content, name, images = read(p)
        origin = msg.origin
        key = (tuple(origin) if origin else (), kind, call_id)
        event = p.event_type
        if event == "stop":
            self._open.pop(key, None)
            return
        seg = self._open.get(key)
        if seg is None or event == "start":
            self._open.pop(key, None)  # a re-opened key moves to the end (R-AGG-6)
            seg = self._open[key] = _Live(msg, kind, call_id)
        seg.segment._take(content, name, images)

    def settle(self, msg: OmniMessage) -> None:
        """A complete message closes the open segment of its origin, kind and call id."""
        if self._open:
            p = msg.payload
            kind = _KIND_OF_COMPLETE.get(type(p))
            if kind is not None:
                origin = msg.origin
                self._open.pop((tuple(origin) if origin else (), kind, _call_id(p)), None)

    def snapshots(self) -> list[OmniMessage]:
        return [seg.snapshot() for seg in self._open.values()]

    def clear(self) -> None:
        self._open.clear()
