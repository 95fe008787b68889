"""``penguin mcp serve``: the read-only trace tools as an MCP server (R-MCP-5).

Owns: the MCP server (the SDK's ``MCPServer``) and its tools over one data root —
``list_sessions``, ``search_sessions``, ``transcript``, ``request_at``, ``validate``, ``diff``
and ``sql`` — each a read of the traces, never a write; the stdio transport; the streamable HTTP
transport bound to 127.0.0.1 behind the server token (``Authorization: Bearer``) and the
Host/Origin checks that stop DNS rebinding.  Does not: implement the trace tools (``replay``,
``penguin.cli.listing``, the session index ``penguin._index``) or take a session's lock.

The ``mcp`` SDK is imported only here, so other commands do not pay for it.
"""

from __future__ import annotations

import hmac
import json
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio

from eventstore import DataRoot

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "DEFAULT_PORT",
    "server_token",
    "TOOL_NAMES",
    "TraceTools",
    "build_server",
    "guard",
    "serve_http",
    "serve_stdio",
]

DEFAULT_PORT: Final = 7365
_MAX_TEXT: Final = 200_000  # a tool answer larger than this is cut (with a note)
_MAX_ROWS: Final = 500
_LOOPBACK: Final = "127.0.0.1"


def _clip(text: str) -> str:
    if len(text) <= _MAX_TEXT:
        return text
    return text[:_MAX_TEXT] + f"\n[cut: {len(text) - _MAX_TEXT} more characters]"


def _json(value: Any) -> str:
    return _clip(json.dumps(value, ensure_ascii=False, indent=1, default=str))


def _files(root: DataRoot, session: str) -> list[Path]:
    """The trace files of ``session`` (an id or a unique prefix of one)."""
    ids = [info.session_id for info in root.sessions()]
    if session in ids:
        chosen = session
    else:
        matches = [i for i in ids if i.startswith(session) or i.endswith(session)]
        if len(matches) != 1:
            found = "no session" if not matches else f"{len(matches)} sessions"
            raise ValueError(f"{found} match {session!r}; list_sessions shows the ids")
        chosen = matches[0]
    return root.trace_files(chosen)


class TraceTools:
    """The read-only trace tools over one data root; each method is one MCP tool (its
    docstring the description the client sees) and answers JSON or Markdown text."""

    def __init__(self, root: DataRoot) -> None:
        self.root = root

    def list_sessions(
        self, limit: int = 20, project: str | None = None, agent: str | None = None
    ) -> str:
        """The sessions of the data root, most recently active first (id, status, turns,
        first prompt, ...)."""
        from penguin.cli.listing import list_sessions as rows

        listed = rows(self.root, project=project, agent=agent, limit=max(1, min(limit, _MAX_ROWS)))
        return _json(
            [
                {
                    "session_id": r.session_id,
                    "project": r.info.project,
                    "agent": r.info.agent,
                    "status": r.status,
                    "turns": r.turns,
                    "records": r.records,
                    "files": len(r.info.files),
                    "first_prompt": r.first_prompt,
                    "workspace": r.workspace,
                    "parent": r.parent,
                }
                for r in listed
            ]
        )

    def search_sessions(self, text: str, limit: int = 20) -> str:
        """Sessions whose prompts, answers, tool calls or tool outputs (the first 4 KiB of each)
        match TEXT, most recently active first, from the session index (as `penguin search`):
        SQLite FTS5 query syntax — words (all must match, any order, case and accents ignored),
        "an exact phrase", prefix*, AND/OR/NOT, NEAR(a b, 5).  Each session with its best hit:
        "at" is FILE:ORDINAL (what request_at takes), "kind" what matched, and a snippet whose
        matching parts have "match": true."""
        from penguin._index import Index, QuerySyntaxError

        if not text.strip():
            raise ValueError("give some text to search for")
        with Index(self.root) as index:
            index.refresh()
            try:
                hits = index.search(text, limit=max(1, min(limit, _MAX_ROWS)))
            except QuerySyntaxError as exc:
                raise ValueError(
                    f"{exc}; put punctuation other than the query syntax in double quotes"
                ) from None
        return _json([h.as_dict() for h in hits])

    def transcript(self, session: str) -> str:
        """A session's transcript as Markdown."""
        from replay import export_trace

        return _clip(export_trace(_files(self.root, session), format="md"))

    def request_at(self, session: str, position: str) -> str:
        """The exact request (system prompt, tools, messages) sent at a request_begin record, or
        the model context at any other record.  POSITION is FILE:ORDINAL (the file number and
        the record's ordinal from 0), as `penguin inspect --at` takes it."""
        from replay import parse_position, trace_point

        point = trace_point(_files(self.root, session), parse_position(position))
        return _json(point.as_json())

    def validate(self, session: str) -> str:
        """Validate a session's trace files: the findings (none when it is valid)."""
        from replay import validate_session

        findings = validate_session(_files(self.root, session))
        return _json(
            {
                "valid": not any(f.severity == "error" for f in findings),
                "findings": [
                    {
                        "file": f.path.name,
                        "line": f.line,
                        "rule": f.rule,
                        "severity": f.severity,
                        "message": f.message,
                    }
                    for f in findings
                ],
            }
        )

    def diff(self, a: str, b: str) -> str:
        """Compare two sessions by structure (runs, turns, tool calls; not timestamps or ids):
        the first divergence and a summary."""
        from replay import diff_traces

        return _json(diff_traces(_files(self.root, a), _files(self.root, b)).as_json())

    def sql(self, query: str) -> str:
        """One read-only SQL query (DuckDB) over the views sessions, records, requests,
        tool_calls, usage and diagnostics of every trace; at most 500 rows."""
        return _json(_sql(self.root, query))


TOOL_NAMES: Final = (
    "list_sessions",
    "search_sessions",
    "transcript",
    "request_at",
    "validate",
    "diff",
    "sql",
)


def build_server(root: DataRoot) -> MCPServer:
    """The MCP server with the read-only trace tools over ``root``."""
    import inspect

    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import ToolAnnotations

    server = MCPServer(
        "penguin-traces",
        log_level="WARNING",  # the SDK logs every request at INFO on stderr otherwise
        instructions=(
            "Read-only tools over the recorded agent sessions of one penguin data root: list and "
            "search sessions, read a transcript, see the exact request sent at a record, validate "
            "a trace, compare two sessions, and query the fleet with SQL."
        ),
    )
    read_only = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)
    tools = TraceTools(root)

    def register(method: Callable[..., str]) -> None:
        async def run(**kwargs: Any) -> str:
            try:
                # The trace tools are synchronous and read files: off the event loop.
                return await anyio.to_thread.run_sync(lambda: method(**kwargs))
            except (ValueError, LookupError, OSError) as exc:
                raise ToolError(str(exc)) from None

        run.__name__ = method.__name__
        run.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
        description = " ".join((method.__doc__ or "").split())
        server.tool(name=method.__name__, description=description, annotations=read_only)(run)

    for name in TOOL_NAMES:
        register(getattr(tools, name))
    return server


def _sql(root: DataRoot, query: str) -> dict[str, Any]:
    from replay.analytics import AnalyticsError, open_fleet

    try:
        # read_only: no file, setting or table can be touched; only reading statements run.
        fleet = open_fleet(home=root.home, read_only=True)
    except AnalyticsError as exc:
        raise ValueError(str(exc)) from None
    with fleet:
        try:
            result = fleet.sql(query)
        except AnalyticsError as exc:
            raise ValueError(str(exc)) from None
        rows = result.dicts()
        return {
            "columns": result.columns,
            "rows": rows[:_MAX_ROWS],
            "truncated": len(rows) > _MAX_ROWS,
        }


# --------------------------------------------------------------------------- transports


def server_token(root: DataRoot, explicit: str | None) -> str:
    """The token of ``penguin serve`` (``--token``, ``$PENGUIN_SERVER_TOKEN``, else
    ``<home>/server-token``, made on first use): one secret for both servers."""
    from penguin.server._auth import load_token

    return load_token(root, explicit)


async def serve_stdio(root: DataRoot) -> None:
    await build_server(root).run_stdio_async()


def _allowed(port: int) -> tuple[set[str], set[str]]:
    hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}
    origins = {f"http://127.0.0.1:{port}", f"http://localhost:{port}"}
    return hosts, origins


def guard(app: ASGIApp, *, port: int, token: str | None) -> ASGIApp:
    """``app`` behind the Host/Origin checks (a DNS-rebinding page reaches 127.0.0.1 under its
    own host name, or from its own origin) and, unless ``token`` is ``None``, the bearer token."""
    from starlette.responses import PlainTextResponse

    hosts, origins = _allowed(port)
    expected = f"Bearer {token}".encode() if token is not None else None

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers") or []}
        host = headers.get(b"host", b"").decode("latin-1")
        origin = headers.get(b"origin")
        refusal: tuple[int, str] | None = None
        if host not in hosts:
            refusal = (421, "Invalid Host header")
        elif origin is not None and origin.decode("latin-1") not in origins:
            refusal = (403, "Invalid Origin header")
        elif expected is not None and not hmac.compare_digest(
            headers.get(b"authorization", b""), expected
        ):
            refusal = (401, "Missing or wrong token (Authorization: Bearer <server token>)")
        if refusal is not None:
            response = PlainTextResponse(refusal[1], status_code=refusal[0])
            if refusal[0] == 401:
                response.headers["WWW-Authenticate"] = "Bearer"
            await response(scope, receive, send)
            return
        await app(scope, receive, send)

    return guarded


async def serve_http(
    root: DataRoot,
    *,
    port: int = DEFAULT_PORT,
    token: str | None,
    ready: Callable[[str], Awaitable[None] | None] | None = None,
) -> None:
    """Serve on 127.0.0.1:``port`` (0: a free one) at ``/mcp`` until cancelled; ``ready(url)``
    once listening.  ``token=None`` turns authentication off (``--no-auth``, tests only)."""
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((_LOOPBACK, port))
    bound = sock.getsockname()[1]
    hosts, origins = _allowed(bound)
    app = build_server(root).streamable_http_app(
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=sorted(hosts),
            allowed_origins=sorted(origins),
        ),
        host=_LOOPBACK,
    )
    url = f"http://{_LOOPBACK}:{bound}/mcp"

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and ready is not None:
                result = ready(url)
                if result is not None:
                    await result

    config = uvicorn.Config(guard(app, port=bound, token=token), log_level="warning", lifespan="on")
    await Server(config).serve(sockets=[sock])
