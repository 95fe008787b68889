"""Steering: input queued while a task runs, delivered between turns (SPEC R-STEER-1…7).

Owns: the queue and turning an entry into recorded user input (one ``[user_steering]`` block
for the texts, then the other messages; images folded for a model without vision, R-STEER-6).
Does not: decide when to deliver (the session does, after each turn) or record (the recorder).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from eventstore import ImageUrlPayload, OmniMessage, TextPayload
from eventstore import builders as b
from projections import markers as mk

from ._images import fold_images

__all__ = ["Steering"]


class Steering:
    """The steering queue of one session."""

    def __init__(self) -> None:
        self._queue: list[list[OmniMessage]] = []

    def __bool__(self) -> bool:
        return bool(self._queue)

    def add(self, messages: Sequence[OmniMessage]) -> None:
        """Queue ``messages`` unless they hold nothing to say (blank texts only)."""
        entry = list(messages)
        if any(
            isinstance(m.payload, ImageUrlPayload)
            or (isinstance(m.payload, TextPayload) and m.payload.text.strip())
            for m in entry
        ):
            self._queue.append(entry)

    def clear(self) -> None:
        self._queue.clear()  # R-CARRY-11

    def deliver(
        self, emit: Callable[[OmniMessage], None], *, scratchpad: Callable[[], Path] | None
    ) -> bool:
        """R-STEER-4…7: drain the queue through ``emit``; ``scratchpad`` is given when images
        must be folded (a model without vision).  Returns whether anything was delivered."""
        delivered = False
        while self._queue:
            entry = self._queue.pop(0)
            if scratchpad is not None:
                entry = fold_images(entry, scratchpad())  # R-STEER-6
            bodies = [
                m.payload.text
                for m in entry
                if isinstance(m.payload, TextPayload) and m.payload.role == "user"
            ]
            emit(b.user_text(mk.steering_block(bodies)))
            for msg in entry:
                if not (isinstance(msg.payload, TextPayload) and msg.payload.role == "user"):
                    emit(b.restamped(msg))  # R-SET-6: stamped when written
            delivered = True
        return delivered
