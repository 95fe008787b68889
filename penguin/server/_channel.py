"""One session's event channel: ids that are trace positions, a bounded replay buffer, live
fragments (R-SRV-6/7/8).

Owns: event ids (``<file>:<ordinal>`` for a record, ``<file>:<ordinal>+<k>`` for the k-th
other event after it), the replay buffer (10,000 events or 8 MiB), subscribers (bounded send
buffers filled at publish time; a subscriber that falls behind is dropped and reconnects
losslessly), the plan of a reconnect (buffer, or the trace when the buffer no longer holds the gap), and the open segments a reload
shows as ``live`` fragments, with the complete messages the running task's subagents streamed
(never in this session's trace, R-SUB-2: a reload shows them under their call again); ``BufferPool``, the bytes all channels' replay buffers may hold
together (issue 29: the least recently used channel's buffer is emptied first).  Does not: read
traces (the host does) or speak HTTP.
"""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import msgspec

from eventstore import OmniMessage, encode
from eventstore.partials import OpenSegments

__all__ = [
    "BufferPool",
    "Channel",
    "Event",
    "Key",
    "ReplayPlan",
    "Subscriber",
    "format_id",
    "parse_id",
]

Key = tuple[int, int, int]
_ID: Final = re.compile(r"(\d{1,9}):(\d{1,12})(?:\+(\d{1,15}))?")
SUBSCRIBER_QUEUE: Final = 20_000
# The running task's subagent messages a reload shows again: the latest, within these bounds
# (the child's own trace holds them all; its page shows the rest).
NESTED_MESSAGES: Final = 2_000
NESTED_BYTES: Final = 4 * 2**20
_json = msgspec.json.Encoder()


def format_id(key: Key) -> str:
    f, o, k = key
    return f"{f}:{o}" if k == 0 else f"{f}:{o}+{k}"


def parse_id(text: str | None) -> Key | None:
    """A ``Last-Event-ID`` as a key; ``None`` for a missing or malformed one."""
    if not text:
        return None
    m = _ID.fullmatch(text.strip())
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


@dataclass(slots=True)
class Event:
    key: Key
    name: str | None  # None: an OmniMessage; "server": a server event
    data: bytes
    recorded: bool
    wire: bytes = b""

    def __post_init__(self) -> None:
        head = b"id: " + format_id(self.key).encode() + b"\n"
        if self.name is not None:
            head += b"event: " + self.name.encode() + b"\n"
        self.wire = head + b"data: " + self.data + b"\n\n"


def server_event(data: dict[str, Any]) -> bytes:
    return _json.encode(data)


def unnumbered(name: str | None, data: bytes) -> bytes:
    """An event without an id (snapshots and notices: they must not move ``Last-Event-ID``)."""
    head = b"" if name is None else b"event: " + name.encode() + b"\n"
    return head + b"data: " + data + b"\n\n"


@dataclass(slots=True, eq=False)
class Subscriber:
    """One connection's send buffer: the channel appends each event's wire bytes to
    ``pending`` at publish time and wakes the connection's writer only when it waits, so a
    burst of events costs one wake-up and one HTTP write, not one each."""

    pending: list[bytes] = field(default_factory=list)
    dropped: bool = False  # fell behind, or the channel closed: end after ``pending``
    _wake: anyio.Event | None = None

    def put(self, wire: bytes) -> None:
        self.pending.append(wire)
        self.wake()

    def wake(self) -> None:
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.set()

    async def wait(self) -> None:
        """Until something is pending or the subscription ended."""
        if self.pending or self.dropped:
            return
        wake = self._wake = anyio.Event()
        await wake.wait()

    def take(self) -> bytes:
        out = b"".join(self.pending)
        self.pending.clear()
        return out


@dataclass(slots=True)
class ReplayPlan:
    """A reconnect the buffer cannot serve: the records after ``after`` up to ``upto`` come from
    the trace, then ``buffered`` (unrecorded events after ``upto``), then ``resync_required``
    when unrecorded events may have been lost."""

    after: tuple[int, int]
    upto: tuple[int, int]
    buffered: list[Event]
    resync: bool


class BufferPool:
    """The replay buffers of every channel of a host, bounded together by bytes.  Over the
    bound, the buffer of the least recently published-to channel is emptied first (its
    reconnects then replay from the trace, R-SRV-8: nothing is lost, only slower)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.total = 0
        self._lru: OrderedDict[Channel, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._lru)

    def grew(self, channel: Channel, delta: int) -> None:
        self.total += delta
        self._lru[channel] = None
        self._lru.move_to_end(channel)
        while self.total > self.max_bytes and len(self._lru) > 1:
            oldest = next(iter(self._lru))
            if oldest is channel:
                break
            oldest.evict_all()  # calls shrank() and forget()

    def shrank(self, delta: int) -> None:
        self.total -= delta

    def forget(self, channel: Channel) -> None:
        self._lru.pop(channel, None)


class Channel:
    """The event channel of one session.  ``start`` is the position of the last record already
    in the trace when the channel was made (``(0, 0)`` for a session with no trace yet);
    ``restored`` says whether an earlier server may have streamed events after it."""

    def __init__(
        self,
        start: tuple[int, int],
        *,
        restored: bool,
        max_events: int = 10_000,
        max_bytes: int = 8 * 2**20,
        pool: BufferPool | None = None,
    ) -> None:
        self._pool = pool
        self._record: tuple[int, int] = start
        self._k = 0
        self._start = start
        self._restored = restored
        self._floor: Key = (*start, 0)
        self._lost: Key | None = None
        self._buf: deque[Event] = deque()
        self._bytes = 0
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._subs: set[Subscriber] = set()
        self._open = OpenSegments()
        self._nested: deque[tuple[OmniMessage, int]] = deque()
        self._nested_bytes = 0

    # ------------------------------------------------------------------ state

    @property
    def last_record(self) -> tuple[int, int]:
        """The position of the last record published (or in the trace at start)."""
        return self._record

    @property
    def cursor(self) -> str | None:
        """The id of the last event published, ``None`` when nothing was."""
        if self._buf:
            return format_id(self._buf[-1].key)
        if self._floor != (*self._start, 0):
            return format_id(self._floor)
        return None if self._start == (0, 0) else format_id((*self._start, 0))

    def fragments(self) -> list[OmniMessage]:
        return self._open.snapshots()

    def nested(self) -> list[OmniMessage]:
        """The complete origin-tagged messages of the running task so far, oldest first."""
        return [msg for msg, _ in self._nested]

    # ------------------------------------------------------------------ publishing

    def publish_record(self, msg: OmniMessage, file: int, ordinal: int) -> None:
        self._record = (file, ordinal)
        self._k = 0
        self._open.settle(msg)
        self._push(Event((file, ordinal, 0), None, encode(msg), True))

    def publish_message(self, msg: OmniMessage) -> None:
        """An unrecorded message run() yielded: a partial or an origin-tagged one."""
        self._open.feed(msg)
        # A child's complete message is never a parent record, so it settles its segment here
        # (a no-op for a fragment): the child's stop fragment may never come.
        self._open.settle(msg)
        self._k += 1
        data = encode(msg)
        if msg.origin and not msg.is_partial:
            self._keep_nested(msg, len(data))
        self._push(Event((*self._record, self._k), None, data, False))

    def _keep_nested(self, msg: OmniMessage, size: int) -> None:
        nested = self._nested
        nested.append((msg, size))
        self._nested_bytes += size
        while len(nested) > NESTED_MESSAGES or (
            self._nested_bytes > NESTED_BYTES and len(nested) > 1
        ):
            self._nested_bytes -= nested.popleft()[1]

    def publish_server(self, data: dict[str, Any]) -> None:
        self._k += 1
        self._push(Event((*self._record, self._k), "server", server_event(data), False))

    def _push(self, ev: Event) -> None:
        buf = self._buf
        buf.append(ev)
        before = self._bytes
        self._bytes += len(ev.wire)
        while len(buf) > self._max_events or (self._bytes > self._max_bytes and len(buf) > 1):
            self._evict_one()
        if self._pool is not None:
            self._pool.grew(self, self._bytes - before)
        wire = ev.wire
        behind: list[Subscriber] = []
        for sub in self._subs:
            pending = sub.pending
            pending.append(wire)
            if len(pending) > SUBSCRIBER_QUEUE:
                behind.append(sub)
            else:
                sub.wake()
        for sub in behind:
            # Too slow: it gets what it has, then its stream ends; it reconnects with its
            # Last-Event-ID and loses nothing (the trace has every record, R-SRV-8).
            self._drop(sub)

    def _evict_one(self) -> None:
        old = self._buf.popleft()
        self._bytes -= len(old.wire)
        self._floor = old.key
        if not old.recorded:
            self._lost = old.key

    def evict_all(self) -> None:
        """Empty the replay buffer (the pool needs the bytes)."""
        before = self._bytes
        while self._buf:
            self._evict_one()
        if self._pool is not None:
            self._pool.shrank(before)
            self._pool.forget(self)

    @property
    def buffered_bytes(self) -> int:
        return self._bytes

    def end_segments(self) -> None:
        """The task ended: nothing is streaming any more."""
        self._open.clear()
        self._nested.clear()
        self._nested_bytes = 0

    # ------------------------------------------------------------------ subscribing

    def subscribe(self, last: Key | None) -> tuple[Subscriber, list[Event] | ReplayPlan]:
        """Register a subscriber and say what it missed, in one synchronous step (so the gap and
        the live queue neither overlap nor leave a hole)."""
        sub = Subscriber()
        self._subs.add(sub)
        if last is None:
            return sub, []
        stale_k = self._restored and last[2] > 0 and last[:2] <= self._start
        if last >= self._floor and not stale_k:
            return sub, [e for e in self._buf if e.key > last]
        upto = self._record
        after_upto = (*upto, 0)
        buffered = [e for e in self._buf if e.key > after_upto]
        lost_here = self._lost is not None and self._lost > last
        return sub, ReplayPlan(
            after=(last[0], last[1]),
            upto=upto,
            buffered=buffered,
            resync=self._restored or lost_here,
        )

    def unsubscribe(self, sub: Subscriber) -> None:
        self._drop(sub)
        sub.pending.clear()

    def _drop(self, sub: Subscriber) -> None:
        self._subs.discard(sub)
        sub.dropped = True
        sub.wake()

    def close(self) -> None:
        for sub in tuple(self._subs):
            self._drop(sub)
        if self._pool is not None:
            self._pool.shrank(self._bytes)
            self._pool.forget(self)
            self._pool = None
