"""Session routes: list, create, get, delete, history, the streams (R-SRV-3, R-SRV-6/7/8/9).

Owns: those handlers.  Does not: hold state (``SessionHost``) or decide a replay (``Channel``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import Response

from engine import DEFAULT_MAX_TURNS, RUN_SUBAGENT, CompactionSettings, McpServer, Session
from eventstore import encode, iter_trace
from penguin._goal import goal_dict
from projections import project

from ._bodies import ArchiveBody, CreateSessionBody, read_body
from ._channel import Event, ReplayPlan, parse_id, unnumbered
from ._context import as_json, ctx_of, json_response
from ._exceptions import ApiError
from ._hosted import Hosted
from ._sse import SSEResponse
from ._traces import indexed_files, records_between, records_of

__all__ = [
    "archive_session",
    "create_session",
    "delete_session",
    "get_session",
    "list_sessions",
    "messages",
    "stream",
    "user_events",
]

_json = msgspec.json.Encoder()


def _compaction(body: CreateSessionBody) -> CompactionSettings | None:
    c = body.compaction
    if c is False:
        return None
    if c is None or c is True:
        return Session.DEFAULT_COMPACTION
    options = {k: v for k, v in msgspec.structs.asdict(c).items() if v is not None}
    return CompactionSettings(**options)


def _cursor(request: Request) -> tuple[int, int]:
    try:
        limit = int(request.query_params.get("limit", "50"))
        start = int(request.query_params.get("cursor", "0") or 0)
    except ValueError:
        raise ApiError(400, "invalid_query", "limit and cursor must be integers") from None
    if not 1 <= limit <= 1000 or start < 0:
        raise ApiError(400, "invalid_query", "limit must be 1..1000 and cursor >= 0")
    return limit, start


def _archived(request: Request) -> bool:
    """``?archived=true``: the archived sessions instead of the others."""
    value = request.query_params.get("archived", "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise ApiError(400, "invalid_query", "archived must be true or false")
    return value in ("true", "1")


async def list_sessions(request: Request) -> Response:
    ctx = ctx_of(request)
    limit, start = _cursor(request)
    archived = _archived(request)
    await ctx.refresh_index()
    rows = await anyio.to_thread.run_sync(ctx.index.session_rows)
    costs = await anyio.to_thread.run_sync(ctx.index.session_costs, ctx.prices)
    seen = {r["id"] for r in rows}
    hosted = ctx.host.hosted
    # Sessions created here and not written yet live only in memory (never archived).
    fresh = [ctx.row(h, None) for sid, h in hosted.items() if sid not in seen]
    all_rows = fresh + [ctx.row(hosted.get(r["id"]), r) for r in rows]
    # The archive mark is the session's record (``session_archived``), projected by the index.
    all_rows = [r for r in all_rows if bool(r.get("archived")) == archived]
    for row in all_rows:
        row["cost"], row["unpriced_tokens"] = costs.get(row["id"], (None, 0))
    # The most recently active first (a new session counts as active when created).
    all_rows.sort(key=lambda r: (_when(r.get("last_active") or r.get("created")), r["id"]))
    all_rows.reverse()
    page = all_rows[start : start + limit]
    nxt = start + limit if start + limit < len(all_rows) else None
    return json_response({"sessions": page, "next_cursor": None if nxt is None else str(nxt)})


def _when(iso: str | None) -> float:
    """Epoch seconds of a row's time (naive: UTC); 0 for none."""
    import datetime as _dt

    if not iso:
        return 0.0
    try:
        when = _dt.datetime.fromisoformat(iso)
    except ValueError:
        return 0.0
    return (when if when.tzinfo else when.replace(tzinfo=_dt.UTC)).timestamp()


def _mcp(
    body: CreateSessionBody, configured: Mapping[str, McpServer]
) -> dict[str, McpServer] | None:
    """The body's MCP servers (None: the configured ones); 400 naming a bad one or a bad
    approval rule."""
    from penguin._mcp_config import McpConfigError, check_rules_table, servers_from_body

    if body.approval_rules is not None:
        try:
            check_rules_table(body.approval_rules, where="approval_rules")
        except McpConfigError as exc:
            raise ApiError(400, "invalid_body", f"{exc} (at `$.approval_rules`)") from None
    if body.mcp is None:
        return None

    tables = {name: msgspec.structs.asdict(server) for name, server in body.mcp.items()}
    try:
        return servers_from_body(tables, configured=configured)
    except McpConfigError as exc:
        raise ApiError(400, "invalid_body", f"{exc} (at `$.mcp`)") from None


async def create_session(request: Request) -> Response:
    ctx = ctx_of(request)
    body = await read_body(request, CreateSessionBody, limit=ctx.body_limit, optional=True)
    if body.max_turns is not None and body.max_turns < 1:
        raise ApiError(400, "invalid_body", "max_turns must be at least 1 (at `$.max_turns`)")
    try:
        compaction = _compaction(body)
    except ValueError as exc:
        raise ApiError(400, "invalid_body", f"invalid compaction settings: {exc}") from None
    h = await ctx.host.create(
        workspace=Path(body.workspace) if body.workspace else None,
        system_prompt=body.system_prompt or "",
        model=body.model,
        approval=body.approval or ctx.host.approval,
        compaction=compaction,
        max_turns=body.max_turns or DEFAULT_MAX_TURNS,
        sandbox=body.sandbox,
        network=body.network,
        mcp=_mcp(body, ctx.host.mcp_servers),
        approval_rules=body.approval_rules,
        subagents=body.subagents,
    )
    # The host announced it (R-SET-6: session_created once per session).
    return json_response(ctx.row(h, None), 201)


async def get_session(request: Request) -> Response:
    ctx = ctx_of(request)
    h = await ctx.host.get(request.path_params["id"])
    await ctx.refresh_index()
    indexed = await anyio.to_thread.run_sync(ctx.index.session_row, h.id)
    row = ctx.row(h, indexed)
    session = h.session
    if session is not None:
        ctxt = session.context
        row.update(
            trace_path=str(session.trace_path),
            context={"turns": session.state.turns_in_context, "messages": len(ctxt.history)},
            carry_over=_carry(ctxt),
            compactability=session.compactability(),
        )
    else:
        try:
            files = ctx.root.trace_files(h.id, project=h.project, agent=h.agent)
            row["trace_path"] = str(files[-1])
        except FileNotFoundError:
            files = []
            row["trace_path"] = None
        if files:
            # Not loaded (never used, or released when idle): the same summary, folded from
            # the latest file without taking the session's lock.
            off = h.overrides.compaction_off
            folded = await anyio.to_thread.run_sync(_folded, files[-1], off)
            if h.sandbox is not None:
                folded.pop("sandbox", None)  # what this server created it with wins
            row.update(folded)
    row["pending_approvals"] = [p.tool_call_id for p in h.pending.values()]
    row["goal"] = goal_dict(session.state.goal) if session is not None else None
    return json_response(row)


def _folded(path: Path, compaction_off: bool) -> dict[str, Any]:
    context, state, _ = project(iter_trace(path, report=False))
    # The latest file holds the settings in effect (every rotated head carries them, R-SET-2c).
    if compaction_off or (state.settings is not None and state.settings.compaction is False):
        verdict = "unsupported"
    elif state.turns_in_context >= 1:
        verdict = "ok"
    else:
        verdict = "just_compacted" if state.from_compaction else "empty"
    out: dict[str, Any] = {
        "context": {"turns": state.turns_in_context, "messages": len(context.history)},
        "carry_over": False,  # lives only in a loaded session's memory
        "compactability": verdict,
    }
    recorded = state.settings
    # Whether it offers run_subagent when loaded (R-SET-3: the recorded tools).
    out["subagents"] = recorded is not None and RUN_SUBAGENT in (recorded.tools or ())
    if recorded is not None and recorded.sandbox is not None:
        # The sandbox it will run under when loaded (SPEC §23: the recorded settings), not the
        # "no sandbox" of a row whose session is not loaded yet after a restart.
        out["sandbox"] = {"mode": recorded.sandbox, "network": bool(recorded.network)}
    return out


def _carry(ctxt: Any) -> bool:
    return bool(ctxt.pending)


async def delete_session(request: Request) -> Response:
    ctx = ctx_of(request)
    h = await ctx.host.get(request.path_params["id"])
    await ctx.host.delete(h)
    await anyio.to_thread.run_sync(ctx.index.refresh)
    return Response(status_code=204)


async def archive_session(request: Request) -> Response:
    """Archive or unarchive (``{"archived": bool}``); answers the session's row."""
    ctx = ctx_of(request)
    body = await read_body(request, ArchiveBody, limit=ctx.body_limit)
    h = await ctx.host.get(request.path_params["id"])
    await ctx.host.set_archived(h, body.archived)
    # Other pages' lists follow (the Web App lists again on it).
    ctx.events.publish_server({"type": "session_archived", "id": h.id, "archived": body.archived})
    await anyio.to_thread.run_sync(ctx.index.refresh)
    indexed = await anyio.to_thread.run_sync(ctx.index.session_row, h.id)
    return json_response(ctx.row(h, indexed))


async def messages(request: Request) -> Response:
    """R-SRV-6: history of one file with positions, plus ``live`` captured at the same step."""
    ctx = ctx_of(request)
    h = await ctx.host.get(request.path_params["id"])
    # Captured synchronously: history is cut at the last published record, fragments and cursor
    # describe the events up to the same point.
    upto = h.channel.last_record
    live = (
        {
            "cursor": h.channel.cursor,
            "fragments": h.channel.fragments(),
            # What the running task's subagents said so far (not in this trace, R-SUB-2).
            "subagent_messages": h.channel.nested(),
        }
        if h.busy is not None
        else None
    )
    try:
        files = indexed_files(ctx.root.trace_files(h.id, project=h.project, agent=h.agent))
    except FileNotFoundError:
        files = []
    wanted = request.query_params.get("file")
    if wanted is not None:
        try:
            index = int(wanted)
        except ValueError:
            raise ApiError(400, "invalid_query", "file must be an integer") from None
    else:
        index = upto[0] if upto != (0, 0) else (files[-1][0] if files else 0)
    path = next((p for i, p in files if i == index), None)
    if path is None and files:
        raise ApiError(404, "file_not_found", "no such trace file")
    recs = await anyio.to_thread.run_sync(records_of, path) if path is not None else []
    parts: list[bytes] = []
    for ordinal, rec in enumerate(recs):
        if (index, ordinal) > upto and upto != (0, 0):
            break
        parts.append(
            b'{"position":{"file":%d,"ordinal":%d},"message":%s}' % (index, ordinal, encode(rec))
        )
    body = b'{"file":%d,"files":[%s],"messages":[%s],"live":%s}' % (
        index,
        b",".join(b"%d" % i for i, _ in files),
        b",".join(parts),
        _json.encode(live),
    )
    return Response(body, media_type="application/json")


def _snapshot(h: Hosted) -> list[bytes]:
    out = [unnumbered("server", _json.encode(h.task_state_data()))]
    for p in h.pending.values():
        data = {"type": "approval_request", "tool_call": as_json(p.call), "origin": p.call.origin}
        out.append(unnumbered("server", _json.encode(data)))
    return out


async def stream(request: Request) -> Response:
    ctx = ctx_of(request)
    h = await ctx.host.get(request.path_params["id"])
    last = parse_id(
        request.headers.get("last-event-id") or request.query_params.get("last_event_id")
    )
    sub, missed = h.channel.subscribe(last)
    snapshot = _snapshot(h)

    async def prelude() -> list[bytes]:
        if isinstance(missed, list):
            return [e.wire for e in missed] + snapshot
        return await _from_trace(ctx.root, h, missed) + snapshot

    return SSEResponse(h.channel, sub, prelude)


async def _from_trace(root: Any, h: Hosted, plan: ReplayPlan) -> list[bytes]:
    files = root.trace_files(h.id, project=h.project, agent=h.agent)

    def read() -> list[bytes]:
        return [
            Event((f, o, 0), None, encode(rec), True).wire
            for f, o, rec in records_between(files, plan.after, plan.upto)
        ]

    out = await anyio.to_thread.run_sync(read)
    out.extend(e.wire for e in plan.buffered)
    if plan.resync:
        out.append(unnumbered("server", b'{"type":"resync_required","fragments":true}'))
    return out


async def user_events(request: Request) -> Response:
    ctx = ctx_of(request)
    last = parse_id(request.headers.get("last-event-id"))
    sub, missed = ctx.events.subscribe(last)
    snapshot = [
        unnumbered(
            "server",
            _json.encode({"type": "session_state", "id": h.id, "state": h.state}),
        )
        for h in ctx.host.hosted.values()
        if h.state != "idle"
    ]

    async def prelude() -> list[bytes]:
        if isinstance(missed, list):
            return [e.wire for e in missed] + snapshot
        return [*(e.wire for e in missed.buffered), *snapshot]

    return SSEResponse(ctx.events, sub, prelude)
