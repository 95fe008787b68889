"""Trace, scratchpad, usage and login routes (R-SRV-1, R-SRV-10/11/12).

Owns: those handlers, and keeping every path they serve inside the session's own directories
(names with ``..``, absolute paths, NUL and symlinks that leave are 404).  Does not: write
traces.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Final

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import FileResponse, Response

from eventstore import Diagnostic, encode, scan_trace
from replay import ImportRefused, parse_position, trace_point, validate_file
from replay import import_trace as replay_import

from ._bodies import ImportBody, LoginBody, read_body
from ._context import ctx_of, json_response
from ._exceptions import ApiError
from ._hosted import Hosted
from ._logins import cookie_name
from ._traces import indexed_files

__all__ = [
    "context_at",
    "import_trace",
    "login",
    "logout",
    "scratchpad",
    "search",
    "trace_page",
    "trace_raw",
    "traces",
    "usage",
    "usage_errors",
]

_INLINE: Final = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}


def _files(request: Request, h: Hosted) -> list[tuple[int, Path]]:
    try:
        return indexed_files(
            ctx_of(request).root.trace_files(h.id, project=h.project, agent=h.agent)
        )
    except FileNotFoundError:
        return []


def _file(request: Request, h: Hosted) -> Path:
    raw = request.path_params["n"]
    try:
        n = int(raw)
    except ValueError:
        raise ApiError(404, "file_not_found", "no such trace file") from None
    for i, p in _files(request, h):
        if i == n:
            return p
    raise ApiError(404, "file_not_found", "no such trace file")


async def traces(request: Request) -> Response:
    ctx = ctx_of(request)
    h = await ctx.host.get(request.path_params["id"])
    files = _files(request, h)

    def describe() -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for i, (index, path) in enumerate(files):
            records = sum(1 for item in scan_trace(path) if not isinstance(item, Diagnostic))
            out.append(
                {
                    "index": index,
                    "name": path.name,
                    "size": path.stat().st_size,
                    "records": records,
                    "closed": i < len(files) - 1,
                }
            )
        return out

    return json_response({"files": await anyio.to_thread.run_sync(describe)})


async def trace_page(request: Request) -> Response:
    ctx = ctx_of(request)
    h = await ctx.host.get(request.path_params["id"])
    path = _file(request, h)
    try:
        offset = int(request.query_params.get("offset", "0"))
        limit = int(request.query_params.get("limit", "500"))
    except ValueError:
        raise ApiError(400, "invalid_query", "offset and limit must be integers") from None
    if offset < 0 or not 1 <= limit <= 10_000:
        raise ApiError(400, "invalid_query", "offset >= 0 and limit 1..10000")

    def page() -> bytes:
        records: list[bytes] = []
        diags: list[bytes] = []
        ordinal = 0
        for item in scan_trace(path):
            if isinstance(item, Diagnostic):
                diags.append(b'{"line":%d,"kind":"%s"}' % (item.line, item.kind.encode()))
                continue
            line, rec = item
            if offset <= ordinal < offset + limit:
                records.append(
                    b'{"ordinal":%d,"line":%d,"record":%s}' % (ordinal, line, encode(rec))
                )
            ordinal += 1
        # The validator's findings for this file (the Web App's trace view shows them).
        findings = [
            {
                "line": f.line,
                "rule": f.rule,
                "severity": f.severity,
                "message": f.message.replace(str(path), path.name),  # never a server path
            }
            for f in validate_file(path, session_files=[p for _, p in _files(request, h)])
        ]
        return b'{"records":[%s],"total":%d,"diagnostics":[%s],"findings":%s}' % (
            b",".join(records),
            ordinal,
            b",".join(diags),
            msgspec.json.encode(findings),
        )

    return Response(await anyio.to_thread.run_sync(page), media_type="application/json")


async def trace_raw(request: Request) -> Response:
    ctx = ctx_of(request)
    h = await ctx.host.get(request.path_params["id"])
    path = _file(request, h)
    return FileResponse(
        path,
        media_type="application/x-ndjson",
        filename=path.name,
        headers={"x-content-type-options": "nosniff"},
    )


async def context_at(request: Request) -> Response:
    """R-SRV-11 / R-TOOL-1: the request sent at ``?at=<file>:<ordinal>`` (or the context after
    any other record), from the same ``replay.trace_point`` as ``penguin inspect --at``."""
    ctx = ctx_of(request)
    h = await ctx.host.get(request.path_params["id"])
    try:
        position = parse_position(request.query_params.get("at", ""))
    except ValueError as exc:
        raise ApiError(400, "invalid_query", str(exc)) from None
    files = [p for _, p in _files(request, h)]

    def build() -> dict[str, object]:
        data = trace_point(files, position).as_json()
        data.pop("path", None)  # a server path; the client names files by index
        return data

    try:
        return json_response(await anyio.to_thread.run_sync(build))
    except ValueError as exc:
        message = str(exc)
        for path in files:  # name files, never server paths
            message = message.replace(str(path), path.name)
        raise ApiError(404, "position_not_found", message) from None


async def import_trace(request: Request) -> Response:
    """R-SRV-11 / R-TOOL-5: ``{jsonl}`` becomes a new session (409 when it exists, 400 with
    the validator's findings)."""
    ctx = ctx_of(request)
    body = await read_body(request, ImportBody, limit=ctx.body_limit)
    data = body.jsonl.encode("utf-8", errors="surrogateescape")
    try:
        result = await anyio.to_thread.run_sync(lambda: replay_import(data, ctx.root))
    except ImportRefused as exc:
        findings = [str(f) for f in exc.findings]
        error = {"code": "invalid_trace", "message": str(exc), "findings": findings}
        return json_response({"error": error}, 400)
    except FileExistsError as exc:
        raise ApiError(409, "trace_session_exists", str(exc)) from None
    except ValueError as exc:
        raise ApiError(400, "invalid_trace", str(exc)) from None
    ctx.session_created_event(result.session_id, "import")
    await ctx.refresh_index(max_age=0)
    h = await ctx.host.get(result.session_id)
    return json_response(ctx.row(h, ctx.index.session_row(result.session_id)), 201)


async def scratchpad(request: Request) -> Response:
    ctx = ctx_of(request)
    h = await ctx.host.get(request.path_params["id"])
    name = request.path_params["name"]
    pad = ctx.root.scratchpad(h.id, project=h.project, agent=h.agent)
    target = _inside(pad, name)
    ctype = _INLINE.get(target.suffix.lower())
    headers = {"x-content-type-options": "nosniff"}
    if ctype is not None:
        return FileResponse(
            target, media_type=ctype, headers=headers, content_disposition_type="inline"
        )
    return FileResponse(
        target, media_type="application/octet-stream", filename=target.name, headers=headers
    )


def _inside(base: Path, name: str) -> Path:
    missing = ApiError(404, "file_not_found", "no such file")
    if not name or "\x00" in name or name.startswith(("/", "\\")) or ".." in Path(name).parts:
        raise missing
    try:
        real_base = base.resolve(strict=True)
        target = (base / name).resolve(strict=True)
    except (OSError, RuntimeError):
        raise missing from None
    if real_base not in target.parents or not target.is_file():
        raise missing
    return target


async def usage(request: Request) -> Response:
    ctx = ctx_of(request)
    q = request.query_params
    group = q.get("group_by", "session")
    if group not in ("session", "model", "day", "hour"):
        raise ApiError(400, "invalid_query", "group_by must be session, model, day or hour")
    _check_dates(q.get("from"), q.get("to"))
    await ctx.refresh_index()
    rows = await anyio.to_thread.run_sync(
        lambda: ctx.index.usage(
            start=q.get("from"),
            end=q.get("to"),
            group_by=group,
            session=q.get("session"),
            prices=ctx.prices,
        )
    )
    return json_response({"group_by": group, "currency": "USD", "rows": rows})


async def usage_errors(request: Request) -> Response:
    ctx = ctx_of(request)
    q = request.query_params
    _check_dates(q.get("from"), q.get("to"))
    await ctx.refresh_index()
    rows = await anyio.to_thread.run_sync(
        lambda: ctx.index.errors(start=q.get("from"), end=q.get("to"), session=q.get("session"))
    )
    return json_response({"errors": rows})


async def login(request: Request) -> Response:
    """A browser login (R-SRV-1): a fresh server-side session; the token itself never goes
    into a cookie (issue 29)."""
    ctx = ctx_of(request)
    body = await read_body(request, LoginBody, limit=64 * 1024)
    import hmac

    if not hmac.compare_digest(body.token.encode("utf-8", "replace"), ctx.token.encode()):
        raise ApiError(401, "unauthorized", "wrong token")
    grant = ctx.logins.create(ctx.token)
    response = json_response({"key": grant.key, "expires": _iso_utc(grant.expires)})
    response.set_cookie(
        cookie_name(request),
        grant.session,
        max_age=int(ctx.logins.ttl),
        httponly=True,
        samesite="strict",
        path="/",
        secure=request.url.scheme == "https",
    )
    return response


async def logout(request: Request) -> Response:
    """Revoke this browser's login (it is authenticated by the guard) and clear its cookie."""
    ctx = ctx_of(request)
    name = cookie_name(request)
    session = request.cookies.get(name)
    if session:
        ctx.logins.revoke(session)
    response = Response(status_code=204)
    response.delete_cookie(name, path="/", httponly=True, samesite="strict")
    return response


def _check_dates(start: str | None, end: str | None) -> None:
    """400 for a ``from``/``to`` that is not an ISO 8601 date or time (issue 29: a typo must
    not read as "no usage")."""
    for name, value in (("from", start), ("to", end)):
        if not value:
            continue
        try:
            datetime.datetime.fromisoformat(value)
        except ValueError:
            raise ApiError(
                400,
                "invalid_query",
                f"{name}={value[:40]!r} is not an ISO 8601 date or time (e.g. 2026-01-31)",
            ) from None


def _iso_utc(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat()


_ = os


async def search(request: Request) -> Response:
    """Full-text search of the sessions (SQLite FTS5 query syntax): ``q`` (required),
    ``limit`` (1..100, default 20), ``since`` (30m, 12h, 7d, 2w or an ISO date), ``workspace``,
    ``project``, ``agent``."""
    import time

    from penguin._index import QuerySyntaxError, parse_since

    ctx = ctx_of(request)
    q = request.query_params
    text = q.get("q", "")
    try:
        limit = int(q.get("limit", "20"))
    except ValueError:
        raise ApiError(400, "invalid_query", "limit must be an integer") from None
    if not 1 <= limit <= 100:
        raise ApiError(400, "invalid_query", "limit must be 1..100")
    since = q.get("since")
    try:
        after = None if not since else parse_since(since, now=time.time())
    except ValueError as exc:
        raise ApiError(400, "invalid_query", f"since: {exc}") from None
    await ctx.refresh_index()
    try:
        hits = await anyio.to_thread.run_sync(
            lambda: ctx.index.search(
                text,
                limit=limit,
                since=after,
                workspace=q.get("workspace") or None,
                project=q.get("project") or None,
                agent=q.get("agent") or None,
            )
        )
    except QuerySyntaxError as exc:
        raise ApiError(400, "invalid_query", str(exc)) from None
    return json_response({"query": text, "hits": [h.as_dict() for h in hits]})
