"""The OpenAPI document (R-SRV-15).

Owns: the table of routes (method, path, handler, body type, summary) the app is built from, so
the document and the served routes cannot drift, and the document itself (bodies as JSON Schema
from the msgspec structures).  Does not: handle requests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from . import _bodies as bd
from . import _routes_control as rc
from . import _routes_files as rf
from . import _routes_sessions as rs
from . import _routes_spans as rsp
from ._responses import SpansOut, UsageOut

__all__ = ["ROUTES", "RouteSpec", "document"]

Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class RouteSpec:
    method: str
    path: str
    handler: Handler
    summary: str
    body: type[Any] | None = None
    responses: tuple[int, ...] = (200,)
    stream: bool = False
    #: Query parameters: (name, JSON Schema, required).
    query: tuple[tuple[str, dict[str, Any], bool], ...] = ()
    #: The 200 answer's type (its JSON Schema goes into the document).
    answer: type[Any] | None = None


_S = "/api/sessions/{id}"

ROUTES: tuple[RouteSpec, ...] = (
    RouteSpec(
        "POST",
        "/api/login",
        rf.login,
        "Start a browser login: a session cookie plus the key to send as X-Penguin-Key",
        bd.LoginBody,
        (200, 401),
    ),
    RouteSpec("POST", "/api/logout", rf.logout, "End this browser login", None, (204,)),
    RouteSpec(
        "GET",
        "/api/sessions",
        rs.list_sessions,
        "Sessions, most recently active first (?limit=&cursor=); ?archived=true: the archived",
        query=(("archived", {"type": "boolean", "default": False}, False),),
    ),
    RouteSpec(
        "POST",
        "/api/sessions",
        rs.create_session,
        "Create a session",
        bd.CreateSessionBody,
        (201, 400),
    ),
    RouteSpec("GET", _S, rs.get_session, "One session's row and state", None, (200, 404)),
    RouteSpec("DELETE", _S, rs.delete_session, "Delete a session", None, (204, 404, 409)),
    RouteSpec(
        "POST",
        _S + "/archive",
        rs.archive_session,
        "Archive or unarchive a session (a session_archived record); answers its row",
        bd.ArchiveBody,
        (200, 400, 404, 409),
    ),
    RouteSpec(
        "GET", _S + "/messages", rs.messages, "History of one file (?file=N) with live fragments"
    ),
    RouteSpec("GET", _S + "/stream", rs.stream, "The session's event stream (SSE)", stream=True),
    RouteSpec("POST", _S + "/tasks", rc.task, "Start a task", bd.TaskBody, (202, 409)),
    RouteSpec("POST", _S + "/abort", rc.abort, "Abort the running task", None, (202, 204)),
    RouteSpec("POST", _S + "/steer", rc.steer, "Steer the running task", bd.SteerBody, (202, 409)),
    RouteSpec(
        "POST",
        _S + "/approvals/{tool_call_id}",
        rc.approve,
        "Answer a pending approval",
        bd.ApprovalBody,
        (204, 404, 409),
    ),
    RouteSpec("POST", _S + "/retry-now", rc.retry_now, "Skip the reconnect wait in progress"),
    RouteSpec("POST", _S + "/compact", rc.compact, "Compact the context", None, (202, 409)),
    RouteSpec(
        "POST", _S + "/fork", rc.fork, "Fork at a trace position", bd.ForkBody, (201, 400, 409)
    ),
    RouteSpec(
        "POST",
        _S + "/rewind",
        rc.rewind,
        "Restore the workspace to a task's end and fork there (or ?dry_run: the plan)",
        bd.RewindBody,
        (200, 201, 400, 409),
    ),
    RouteSpec("POST", _S + "/title", rc.title, "Generate a title (never recorded)"),
    RouteSpec("GET", _S + "/traces", rf.traces, "Trace files"),
    RouteSpec("GET", _S + "/traces/{n}", rf.trace_page, "Records of one file (?offset=&limit=)"),
    RouteSpec("GET", _S + "/traces/{n}/raw", rf.trace_raw, "One file as JSONL (attachment)"),
    RouteSpec(
        "GET",
        _S + "/context",
        rf.context_at,
        "The request at ?at=<file>:<ordinal>",
        None,
        (200, 400, 404),
    ),
    RouteSpec(
        "GET", _S + "/scratchpad/{name:path}", rf.scratchpad, "A scratchpad file", None, (200, 404)
    ),
    RouteSpec(
        "POST",
        "/api/traces/import",
        rf.import_trace,
        "Import a trace",
        bd.ImportBody,
        (201, 400, 409),
    ),
    RouteSpec(
        "GET",
        _S + "/spans",
        rsp.spans,
        "The span tree: runs, turns, requests, tool calls, compactions, subagents nested",
        None,
        (200, 404),
        answer=SpansOut,
    ),
    RouteSpec(
        "GET",
        "/api/usage",
        rf.usage,
        "Usage aggregates with estimated cost (?from=&to=&group_by=&session=)",
        answer=UsageOut,
    ),
    RouteSpec("GET", "/api/usage/errors", rf.usage_errors, "Failed requests"),
    RouteSpec(
        "GET",
        "/api/search",
        rf.search,
        "Sessions whose texts, tool calls or outputs match an FTS5 query, newest first",
        query=(
            ("q", {"type": "string", "minLength": 1}, True),
            ("limit", {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}, False),
            ("since", {"type": "string"}, False),
            ("workspace", {"type": "string"}, False),
            ("project", {"type": "string"}, False),
            ("agent", {"type": "string"}, False),
        ),
        answer=bd.SearchAnswer,
    ),
    RouteSpec(
        "GET", "/api/events", rs.user_events, "Session states of the server (SSE)", stream=True
    ),
)

_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
            "required": ["code", "message"],
        }
    },
    "required": ["error"],
}


# Statuses any route may answer (R-SRV-2: one error shape): a bad query or path, no token, an
# unknown session, a server shutting down; writes also a cookie write from another origin, a
# stalled or oversized body, a non-JSON body, a busy session.
_COMMON_ERRORS: tuple[int, ...] = (400, 401, 404, 503)
_WRITE_ERRORS: dict[str, tuple[int, ...]] = {
    "POST": (403, 408, 409, 413, 415),
    "DELETE": (403, 409),
}
_MEDIA: dict[str, str] = {
    _S + "/traces/{n}/raw": "application/x-ndjson",
    _S + "/scratchpad/{name:path}": "*/*",
}
_MAKES_SESSION = frozenset({"/api/sessions", _S + "/fork", "/api/traces/import"})


def operation_id(r: RouteSpec) -> str:
    return f"{r.method.lower()}_{r.handler.__name__}"


def openapi_path(path: str) -> str:
    return path.replace("{name:path}", "{name}")


def document() -> dict[str, Any]:
    bodies = sorted(
        {t for r in ROUTES for t in (r.body, r.answer) if t is not None}, key=lambda t: t.__name__
    )
    schemas, components = msgspec.json.schema_components(
        bodies, ref_template="#/components/schemas/{name}"
    )
    refs = dict(zip(bodies, schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    error = {
        "description": "error",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    for r in ROUTES:
        op: dict[str, Any] = {"operationId": operation_id(r), "summary": r.summary}
        responses: dict[str, Any] = {}
        for status in sorted({*r.responses, *_COMMON_ERRORS, *_WRITE_ERRORS.get(r.method, ())}):
            if status >= 400:
                responses[str(status)] = error
            elif status == 204:
                responses["204"] = {"description": "no content"}
            else:
                kind = _MEDIA.get(r.path, "text/event-stream" if r.stream else "application/json")
                media: dict[str, Any] = {}
                if r.answer is not None and status == 200:
                    media["schema"] = refs[r.answer]
                responses[str(status)] = {"description": "ok", "content": {kind: media}}
        if r.method == "POST" and r.path in _MAKES_SESSION:
            # Where a new session's id leads (stateful clients and fuzzers follow these).
            responses[str(min(s for s in r.responses if s < 300))]["links"] = {
                operation_id(t): {
                    "operationId": operation_id(t),
                    "parameters": {"id": "$response.body#/id"},
                }
                for t in ROUTES
                if t.path.startswith(_S)
            }
        op["responses"] = responses
        if r.path == "/api/login":
            op["security"] = []  # the one route that takes no token
        if r.body is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": refs[r.body]}},
            }
        params = [seg[1:-1].split(":")[0] for seg in r.path.split("/") if seg.startswith("{")]
        parameters = [
            {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
            for p in params
        ] + [
            {"name": name, "in": "query", "required": required, "schema": schema}
            for name, schema, required in r.query
        ]
        if parameters:
            op["parameters"] = parameters
        paths.setdefault(openapi_path(r.path), {})[r.method.lower()] = op
    components["Error"] = _ERROR_SCHEMA
    return {
        "openapi": "3.1.0",
        "info": {"title": "penguin serve", "version": "1"},
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }
