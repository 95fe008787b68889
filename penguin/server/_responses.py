"""Typed response bodies for the OpenAPI document (R-SRV-15): the usage aggregates with their
estimated cost, and a session's span tree.

Owns: those shapes (msgspec structures, so the document's JSON Schema is generated from them and
the fuzz test checks every answer against it).  Does not: build them (the route modules do).
"""

from __future__ import annotations

import msgspec

__all__ = ["SpanOut", "SpansOut", "TokensOut", "UsageOut", "UsageRowOut"]


class UsageRowOut(msgspec.Struct, kw_only=True):
    """One aggregate: ``cost`` is the estimate in US dollars from the price table (``None``
    when none of the group's models has a price); ``unpriced_tokens`` the tokens of its models
    without a price (shown as tokens only)."""

    key: str | None
    requests: int
    cache_read: int
    cache_write: int
    output: int
    total: int
    cost: float | None
    unpriced_tokens: int


class UsageOut(msgspec.Struct, kw_only=True):
    group_by: str
    currency: str
    rows: list[UsageRowOut]


class TokensOut(msgspec.Struct, kw_only=True):
    cache_read: int
    cache_write: int
    output: int
    total: int


class SpanOut(msgspec.Struct, kw_only=True):
    """One span of the tree: ``at`` is the ``file:ordinal`` of the record that opened it, in
    ``session`` (a subagent's spans are in the child session); ``latency_ms`` is ``None`` while
    it is open; ``tokens`` sums what is below (a subagent call: its child's)."""

    kind: str
    session: str
    at: str
    start: str
    end: str | None
    latency_ms: float | None
    status: str | None
    name: str | None
    tool_call_id: str | None
    subagent: str | None
    tokens: TokensOut | None
    cost: float | None
    children: list[SpanOut]


class SpansOut(msgspec.Struct, kw_only=True):
    session: str
    model: str | None
    spans: list[SpanOut]
