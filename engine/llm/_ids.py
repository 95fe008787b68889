"""Session-unique tool-call ids for providers that reuse an id (SPEC R-RUN-20).

Owns: the registry of ``tool_call_id``s already taken, the inbound ``<id>#<n>`` allocation and the
outbound suffix strip.  Does not: know any wire format (the adapters call it).

Some providers report the function name as the call id, so two calls of one tool share an id, and
the engine pairs calls and outputs by id.  Inbound, a provider id already taken becomes
``<id>#<n>`` with the smallest free ``n >= 2``; outbound, a trailing ``#<digits>`` is stripped
so the provider gets its own id back.  Real provider ids (``call_…``, ``toolu_…``, function
names) never end in ``#<digits>``, so stripping by shape is safe.

The LLM is stateless (the engine passes the whole context each time), so the registry is seeded
from every request's messages.  An adapter also keeps what it allocated itself, which extends
uniqueness across compactions and over failed attempts whose ids never reached a committed
context.  A fresh adapter on a resumed session knows neither of those: the session hands it the
ids its trace records (``take``, through ``SeedsToolCallIds``), so a call approved in an attempt
a crash left open — closed ``aborted`` on resume, in no later request — keeps its id to itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from eventstore import OmniMessage, ToolCallOutputPayload, ToolCallPayload

__all__ = ["ToolCallIds", "strip_suffix"]

_SUFFIX: Final = re.compile(r"#\d+\Z")


def strip_suffix(tool_call_id: str) -> str:
    """The provider's original id: ``read_file#3`` → ``read_file`` (idempotent)."""
    if "#" not in tool_call_id:
        return tool_call_id
    return _SUFFIX.sub("", tool_call_id)


class ToolCallIds:
    """The ids taken in one session: seeded from history, grown by ``allocate``."""

    __slots__ = ("_used",)

    def __init__(self) -> None:
        self._used: set[str] = set()

    def __contains__(self, tool_call_id: object) -> bool:
        return tool_call_id in self._used

    def __len__(self) -> int:
        return len(self._used)

    def seed(self, messages: Iterable[OmniMessage]) -> None:
        """Mark every ``tool_call_id`` in ``messages`` as taken (calls and outputs alike)."""
        used = self._used
        for msg in messages:
            p = msg.payload
            if isinstance(p, (ToolCallPayload, ToolCallOutputPayload)):
                used.add(p.tool_call_id)

    def take(self, ids: Iterable[str]) -> None:
        """Mark ``ids`` as taken (the ids a resumed session's trace records)."""
        self._used.update(ids)

    def allocate(self, provider_id: str) -> str:
        """``provider_id`` if it is free, else ``provider_id#n`` with the smallest free n >= 2."""
        candidate = provider_id
        n = 2
        while candidate in self._used:
            candidate = f"{provider_id}#{n}"
            n += 1
        self._used.add(candidate)
        return candidate
