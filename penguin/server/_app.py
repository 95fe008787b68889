"""The ASGI application (SPEC §19): ``create_app(root, ...)`` builds it without binding a port.

Owns: assembling Starlette from the route table, the guard (token on every ``/api`` route but
login), one error shape for every failure (no traceback reaches a client; a real fault is
logged with a request id and answered 500), and the lifespan (the session host and the index
watcher).  Does not: implement a route.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, HTTPConnection, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine import McpServer, RetryPolicy
from eventstore import DataRoot, FsyncPolicy
from penguin._index import Index
from penguin.web import web_app
from projections import DEFAULT_PRICES, Price

from ._auth import authenticate, load_token
from ._bodies import BODY_TIMEOUT_S
from ._context import ServerContext, error_response, json_response
from ._exceptions import ApiError
from ._host import IDLE_RELEASE_S, EnvironmentFactory, LLMFactory, SessionHost
from ._hosted import ApprovalMode
from ._logins import LOGIN_TTL_S, Logins
from ._openapi import ROUTES, document
from ._watch import watch_traces

if TYPE_CHECKING:
    from replay.otel import LiveExport

__all__ = ["create_app"]

log = logging.getLogger("penguin.server")
_OPEN = frozenset({"/api/login"})


class _Guard:
    def __init__(self, app: ASGIApp, ctx: ServerContext) -> None:
        self.app = app
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            if (path == "/api" or path.startswith("/api/")) and path not in _OPEN:
                try:
                    authenticate(HTTPConnection(scope), self.ctx.token, self.ctx.logins)
                except ApiError as exc:
                    await error_response(exc.status, exc.code, exc.message)(scope, receive, send)
                    return
            await self._faults_logged_once(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _faults_logged_once(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A real fault is one log entry with its traceback and request id, answered 500
        (issue 29: Starlette's own handler re-raises it, and uvicorn logged it a second time)."""
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            rid = secrets.token_hex(6)
            log.error(
                "request %s %s failed (request id %s)",
                scope.get("method"),
                scope.get("path"),
                rid,
                exc_info=exc,
            )
            if not started:
                response = error_response(
                    500, "internal_error", f"internal error (request id {rid})"
                )
                await response(scope, receive, send)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    response = error_response(exc.status, exc.code, exc.message)
    if exc.status == 408:
        response.headers["connection"] = "close"  # the rest of the body is never read
    return response


async def _gone(request: Request, exc: Exception) -> Response:
    """A client that hung up mid-request is not a server fault: one debug line (issue 29)."""
    log.debug("client went away during %s %s", request.method, request.url.path)
    return Response(status_code=400)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
    return error_response(exc.status_code, code, str(exc.detail))


class _Lifespan:
    def __init__(
        self, ctx: ServerContext, *, watch: bool, tracing: LiveExport | None = None
    ) -> None:
        self.ctx = ctx
        self.watch = watch
        self.tracing = tracing
        self._tg_cm: Any = None

    async def __aenter__(self) -> None:
        await self.ctx.host.__aenter__()
        try:
            self.ctx.loop = asyncio.get_running_loop()
        except RuntimeError:
            self.ctx.loop = None  # not asyncio (trio): SIGTERM is uvicorn's alone
        self._tg_cm = anyio.create_task_group()
        tg: anyio.abc.TaskGroup = await self._tg_cm.__aenter__()
        await anyio.to_thread.run_sync(self.ctx.index.refresh)
        self.ctx.known_at_start()
        if self.watch:
            tg.start_soon(watch_traces, self.ctx)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._tg_cm.cancel_scope.cancel()
            await self._tg_cm.__aexit__(None, None, None)
        finally:
            await self.ctx.host.__aexit__(exc_type, exc, tb)
            self.ctx.events.close()
            self.ctx.index.close()
            if self.tracing is not None:
                # Sends what is queued (in a thread: it may wait for a slow endpoint).
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self.tracing.shutdown)


LOGINS_FILE = "server-logins.json"


def _logins(root: DataRoot, ttl: float) -> Logins:
    """The browser logins, kept across restarts in ``<home>/server-logins.json`` (digests
    only, 0600), so an open page reconnects to a restarted server by itself."""
    path = root.home / LOGINS_FILE

    def save(data: bytes) -> None:
        try:
            root.write_private(path, data)
        except OSError as exc:  # the logins still work; they only will not survive a restart
            log.warning("cannot save the browser logins to %s: %s", path, exc)

    try:
        saved: bytes | None = path.read_bytes()
    except FileNotFoundError:
        saved = None
    except OSError as exc:
        log.warning("cannot read the saved browser logins %s: %s", path, exc)
        saved = None
    try:
        return Logins(ttl=ttl, saved=saved, save=save)
    except ValueError as exc:
        log.warning("%s: %s; every browser must log in again", path, exc)
        return Logins(ttl=ttl, save=save)


def create_app(
    root: DataRoot | str | Path | None = None,
    *,
    token: str | None = None,
    llm_factory: LLMFactory | None = None,
    environment_factory: EnvironmentFactory | None = None,
    workspace: str | Path | None = None,
    approval: ApprovalMode = "ask",
    body_limit: int = 64 * 2**20,
    buffer_events: int = 10_000,
    buffer_bytes: int = 8 * 2**20,
    watch: bool = True,
    retry: RetryPolicy | None = None,
    fsync: FsyncPolicy = "turn",
    login_ttl: float = LOGIN_TTL_S,
    body_timeout: float = BODY_TIMEOUT_S,
    idle_release: float | None = IDLE_RELEASE_S,
    buffer_pool_bytes: int = 256 * 2**20,
    mcp_servers: Mapping[str, McpServer] | None = None,
    snapshots: bool = True,
    otlp: str | None = None,
    prices: Mapping[str, Price] | None = None,
    subagents: bool = False,
) -> Starlette:
    """The server as an ASGI app; nothing runs until its lifespan starts.  ``fsync`` is the
    durability policy of the sessions it writes (R-TRACE-16); weaker than ``turn`` only by
    choice.  A browser login lasts ``login_ttl`` seconds; a request body that stalls for
    ``body_timeout`` seconds is answered 408; a session unused for ``idle_release`` seconds
    releases its lock (``None``: never) so other processes can resume it; all sessions' replay
    buffers together hold at most ``buffer_pool_bytes`` (least recently used emptied first)
    (issue 29).  ``snapshots``: the sessions it creates and loads take workspace snapshots
    (SPEC §27; on by default, as in the CLI).  ``otlp``: an OTLP/HTTP endpoint the sessions'
    spans are sent to as their records are written (``replay.otel.LiveExport``).  ``prices``:
    USD per million tokens by model (``projections.Price``; default
    ``projections.DEFAULT_PRICES``) for the estimated costs.  ``subagents``: a library host's
    default for new sessions whose body does not say ``subagents`` (SPEC §11: the
    ``run_subagent`` tool; off unless chosen — ``penguin serve`` leaves it to each session)."""
    data_root = root if isinstance(root, DataRoot) else DataRoot(root)
    tracing = None
    if otlp is not None:
        from replay.otel import LiveExport

        def subagent_files(session_id: str) -> list[Path]:
            try:
                return data_root.session_files(session_id)[0]
            except (FileNotFoundError, ValueError):
                return []

        tracing = LiveExport(otlp, subagent_files=subagent_files)
    ctx_box: list[ServerContext] = []
    host = SessionHost(
        data_root,
        llm_factory=llm_factory,
        environment_factory=environment_factory,
        workspace=Path(workspace) if workspace is not None else None,
        approval=approval,
        buffer_events=buffer_events,
        buffer_bytes=buffer_bytes,
        retry=retry,
        fsync=fsync,
        idle_release=idle_release,
        buffer_pool_bytes=buffer_pool_bytes,
        mcp_servers=mcp_servers,
        snapshots=snapshots,
        tracing=tracing,
        subagents=subagents,
        on_state=lambda h: ctx_box[0].session_state_event(h),
        on_created=lambda sid, source: ctx_box[0].session_created_event(sid, source),
    )
    ctx = ServerContext(
        root=data_root,
        host=host,
        index=Index(data_root),
        token=load_token(data_root, token),
        body_limit=body_limit,
        logins=_logins(data_root, login_ttl),
        body_timeout=body_timeout,
        prices=dict(DEFAULT_PRICES if prices is None else prices),
    )
    ctx_box.append(ctx)

    async def openapi(request: Request) -> Response:
        return json_response(document())

    routes: list[BaseRoute] = [Route(r.path, r.handler, methods=[r.method]) for r in ROUTES]
    routes.append(Route("/api/openapi.json", openapi, methods=["GET"]))
    routes.append(Mount("/", app=web_app()))  # the Web App (SPEC §20); /api routes match first
    app = Starlette(
        routes=routes,
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            ClientDisconnect: _gone,
        },
        lifespan=lambda app: _Lifespan(ctx, watch=watch, tracing=tracing),
    )
    app.state.penguin = ctx
    app.add_middleware(_Guard, ctx=ctx)
    return app
