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
    RouteSpec("GET", "/api/sessions", rs.list_sessions, "Sessions, newest first (?limit=&cursor=)"),
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
    RouteSpec("GET", "/api/usage", rf.usage, "Usage aggregates (?from=&to=&group_by=&session=)"),
    RouteSpec("GET", "/api/usage/errors", rf.usage_errors, "Failed requests"),
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


def openapi_path(path: str) -> str:
    return path.replace("{name:path}", "{name}")


def document() -> dict[str, Any]:
    bodies = sorted({r.body for r in ROUTES if r.body is not None}, key=lambda t: t.__name__)
    schemas, components = msgspec.json.schema_components(
        bodies, ref_template="#/components/schemas/{name}"
    )
    refs = dict(zip(bodies, schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for r in ROUTES:
        op: dict[str, Any] = {"summary": r.summary, "responses": {}}
        for status in r.responses:
            if status >= 400:
                op["responses"][str(status)] = {
                    "description": "error",
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
                    },
                }
            else:
                kind = "text/event-stream" if r.stream else "application/json"
                op["responses"][str(status)] = {"description": "ok", "content": {kind: {}}}
        op["responses"]["401"] = {"description": "missing or wrong token"}
        if r.body is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": refs[r.body]}},
            }
        params = [seg[1:-1].split(":")[0] for seg in r.path.split("/") if seg.startswith("{")]
        if params:
            op["parameters"] = [
                {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
                for p in params
            ]
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
