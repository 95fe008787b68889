"""The span-tree route: ``GET /api/sessions/{id}/spans`` (the trace view's tree).

Owns: folding a session's files into ``projections.SpanTree`` with their ``file:ordinal``
positions, hanging each subagent's own tree under the ``run_subagent`` call that started it
(recursively, children found beside the parent), and pricing each span from the price table.
Does not: decide what a span is (the projection does) or hold any state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import Response

from eventstore import DataRoot, SessionMetaPayload, TokenCounts, tail
from projections import Price, Span, SpanTree, estimate_cost, price_for

from ._context import ctx_of
from ._responses import SpanOut, SpansOut, TokensOut
from ._traces import indexed_files

__all__ = ["spans"]

# Subagents nest (a child may start its own); deeper than this is shown as a pointer only.
_MAX_DEPTH: Final = 8
_encode = msgspec.json.Encoder().encode


async def spans(request: Request) -> Response:
    ctx = ctx_of(request)
    h = await ctx.host.get(request.path_params["id"])
    out = await anyio.to_thread.run_sync(
        lambda: _session_spans(ctx.root, h.id, h.project, h.agent, ctx.prices)
    )
    return Response(_encode(out), media_type="application/json")


def _session_spans(
    root: DataRoot, sid: str, project: str, agent: str, prices: Mapping[str, Price]
) -> SpansOut:
    model, spans = _fold(root, sid, project, agent, prices, depth=0, seen=frozenset())
    return SpansOut(session=sid, model=model, spans=spans)


def _fold(
    root: DataRoot,
    sid: str,
    project: str,
    agent: str,
    prices: Mapping[str, Price],
    *,
    depth: int,
    seen: frozenset[str],
) -> tuple[str | None, list[SpanOut]]:
    try:
        files = root.trace_files(sid, project=project, agent=agent)
    except (FileNotFoundError, LookupError, ValueError, OSError):
        return None, []  # not written yet (a new session) or gone: no spans
    tree = SpanTree()
    model: str | None = None
    for index, path in indexed_files(files):
        try:
            read = tail(path)
        except OSError:
            continue
        for t in read.records:
            if isinstance(t.record.payload, SessionMetaPayload) and t.record.origin is None:
                model = t.record.payload.model_id
            tree.apply(t.record, index, t.ordinal)
    price = price_for(model, prices) if model is not None else None
    inner = seen | {sid}
    return model, [
        _out(span, sid, price, root, project, agent, prices, depth, inner) for span in tree.roots
    ]


def _out(
    span: Span,
    sid: str,
    price: Price | None,
    root: DataRoot,
    project: str,
    agent: str,
    prices: Mapping[str, Price],
    depth: int,
    seen: frozenset[str],
) -> SpanOut:
    children = [
        _out(c, sid, price, root, project, agent, prices, depth, seen) for c in span.children
    ]
    child = span.subagent
    if child is not None and depth < _MAX_DEPTH and child not in seen:
        _model, sub = _fold(root, child, project, agent, prices, depth=depth + 1, seen=seen)
        children.extend(sub)
    tokens = span.tokens if span.kind == "request" else _sum_tokens(children)
    if span.kind == "request":
        cost = estimate_cost(span.tokens, price) if span.tokens is not None else None
    else:
        costs = [c.cost for c in children if c.cost is not None]
        cost = sum(costs) if costs else None
    end = span.finished()
    return SpanOut(
        kind=span.kind,
        session=sid,
        at=f"{span.file}:{span.ordinal}",
        start=span.start,
        end=end,
        latency_ms=span.latency_ms(),
        status=span.status,
        name=span.name,
        tool_call_id=span.tool_call_id,
        subagent=child,
        tokens=None if tokens is None else TokensOut(**msgspec.structs.asdict(tokens)),
        cost=cost,
        children=children,
    )


def _sum_tokens(children: list[SpanOut]) -> TokenCounts | None:
    total: TokenCounts | None = None
    for c in children:
        if c.tokens is not None:
            counts = TokenCounts(**msgspec.structs.asdict(c.tokens))
            total = counts if total is None else total + counts
    return total
