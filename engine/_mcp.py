"""MCP tools: the tools of Model Context Protocol servers as an Environment (SPEC §26).

Owns: ``McpServer`` (how to reach one server: a command over stdio or a streamable HTTP URL,
with its secrets kept out of records), ``McpEnvironment`` (one connection per server, held open
by a task of its own; tool listing under ``NAME__tool`` names; calls; a server that dies is
restarted for the next call; one that cannot be reached keeps the tools it had when the session
was recorded, and they fail), the mapping of a ``tools/call`` result to a tool output (text,
images as data URLs, embedded resources, structured content; ``isError`` and protocol errors
fail the call), and ``SessionTools`` (an environment plus MCP tools, calls routed by name,
and the approval rules).  Does
not: frame, truncate or time out output — each MCP tool is a ``Tool`` run by a
``LocalEnvironment``, so timeouts and aborts cancel the call, and the SDK then sends the server
``notifications/cancelled``.  Does not: approve calls (``engine._approval``).

The ``mcp`` SDK is imported only when a server is first contacted: ``import engine`` and the CLI
do not pay for it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import urllib.parse
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, Self

import anyio
import anyio.abc
from pydantic import BaseModel, ConfigDict

from eventstore import OmniMessage, ToolCallPayload, ToolDefinition

from ._approval import ApprovalRule, apply_rules, check_rules
from ._local import LocalEnvironment
from ._protocols import ApproveFn, BindsScratchpad, Environment
from ._signal import AbortSignal
from ._tools import Tool, ToolError, ToolResult

if TYPE_CHECKING:
    from mcp import Client

__all__ = ["McpEnvironment", "McpServer", "SessionTools", "mcp_rules", "session_tools"]

SEPARATOR: Final = "__"
_SERVER_NAME: Final = re.compile(r"^[A-Za-z0-9_-]{1,48}$")
_TOOL_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")
_DEFAULT_CONNECT_TIMEOUT_MS: Final = 30000
_DEFAULT_TIMEOUT_MS: Final = 120000
_DEFAULT_MAX_OUTPUT: Final = 16000
# JSON-RPC error code the SDK uses for a connection that ended under a pending request.
_CONNECTION_CLOSED: Final = -32000

_log = logging.getLogger("engine")


# --------------------------------------------------------------------------- McpServer


@dataclass(frozen=True, kw_only=True)
class McpServer:
    """One MCP server: ``command`` (argv, run over stdio with ``env`` added to a minimal
    environment, in ``cwd`` or the workspace) or ``url`` (streamable HTTP, sent ``headers``).

    ``timeout_ms`` bounds each call (``None``: the environment's tool timeout; ``<= 0``: none);
    ``connect_timeout_ms`` the start and handshake (``None``: the environment's, 30 s).
    ``approval`` is the rule for every tool of the server and ``tools`` per tool (by the
    server's own tool name): ``allow``, ``ask`` or ``deny`` (R-MCP-3).  ``env`` and ``headers``
    values are secrets: never recorded, never shown (R-SET-4).
    """

    command: Sequence[str] | None = None
    url: str | None = None
    env: Mapping[str, str] | None = None
    headers: Mapping[str, str] | None = None
    cwd: str | None = None
    timeout_ms: int | None = None
    connect_timeout_ms: int | None = None
    approval: ApprovalRule | None = None
    tools: Mapping[str, ApprovalRule] | None = None
    # Why this server is not started (a resumed session's server that its host no longer
    # offers): its recorded tools are listed and fail with this reason (R-MCP-4).
    unavailable: str | None = None

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server needs exactly one of command (stdio) or url (HTTP)")
        if self.command is not None:
            if isinstance(self.command, str):
                raise TypeError("McpServer.command is a list of arguments, not a string")
            command = tuple(str(part) for part in self.command)
            if not command or not command[0]:
                raise ValueError("McpServer.command is empty")
            object.__setattr__(self, "command", command)
        if self.url is not None:
            parts = urllib.parse.urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(
                    f"MCP server url must be http(s)://host/...: {redact_url(self.url)}"
                )
        if self.env is not None and self.url is not None:
            raise ValueError("env applies to a command (stdio) server only")
        if self.headers is not None and self.command is not None:
            raise ValueError("headers apply to a url (HTTP) server only")
        if self.approval is not None:
            check_rules({"x": self.approval})
        if self.tools is not None:
            check_rules({_TOOL_UNSAFE.sub("_", k)[:64] or "x": v for k, v in self.tools.items()})

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"

    def record(self) -> dict[str, Any]:
        """What the settings record keeps (SPEC §23): the command or the URL without its
        userinfo, query and fragment — never ``env`` or ``headers`` values (R-SET-4)."""
        out: dict[str, Any] = {"transport": self.transport}
        if self.command is not None:
            out["command"] = list(self.command)
        if self.url is not None:
            out["url"] = redact_url(self.url)
        if self.timeout_ms is not None:
            out["timeout_ms"] = self.timeout_ms
        if self.connect_timeout_ms is not None:
            out["connect_timeout_ms"] = self.connect_timeout_ms
        return out

    @classmethod
    def from_record(cls, value: Mapping[str, Any], *, unavailable: str | None = None) -> McpServer:
        """A server rebuilt from its settings record (no secrets: those come from config);
        with ``unavailable``, one that is never started (its tools fail with that reason)."""
        timeout = value.get("timeout_ms")
        connect = value.get("connect_timeout_ms")
        return cls(
            command=value.get("command"),
            url=value.get("url"),
            timeout_ms=timeout if isinstance(timeout, int) else None,
            connect_timeout_ms=connect if isinstance(connect, int) else None,
            unavailable=unavailable,
        )

    def describe(self) -> str:
        """One line for people: the command or the redacted URL."""
        if self.command is not None:
            return " ".join(self.command)
        return redact_url(self.url or "")


def redact_url(url: str) -> str:
    """``url`` without userinfo, query and fragment (where tokens hide)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{host}:{parts.port}" if parts.port is not None else host
    except ValueError:
        return "<invalid url>"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def check_server_name(name: str) -> str:
    if not isinstance(name, str) or not _SERVER_NAME.match(name):
        raise ValueError(f"MCP server name {name!r}: use 1-48 of [A-Za-z0-9_-]")
    return name


def mcp_rules(servers: Mapping[str, McpServer]) -> dict[str, ApprovalRule]:
    """The approval rules the servers declare, as tool-name rules (``fs__*``, ``fs__write``)."""
    rules: dict[str, ApprovalRule] = {}
    for name, server in servers.items():
        if server.approval is not None:
            rules[f"{name}{SEPARATOR}*"] = server.approval
        for tool, rule in (server.tools or {}).items():
            rules[tool_name(name, tool)] = rule
    return rules


def tool_name(server: str, tool: str) -> str:
    """The name the model sees for ``tool`` of ``server``: ``server__tool``, made safe."""
    return _TOOL_UNSAFE.sub("_", f"{server}{SEPARATOR}{tool}")[:64]


# --------------------------------------------------------------------------- results


def convert_result(result: Any) -> tuple[str, list[str]]:
    """A ``CallToolResult`` as (text, image data URLs), R-MCP-2."""
    import mcp_types as t

    parts: list[str] = []
    images: list[str] = []
    for block in result.content or ():
        if isinstance(block, t.TextContent):
            parts.append(block.text)
        elif isinstance(block, t.ImageContent):
            images.append(f"data:{block.mime_type};base64,{block.data}")
        elif isinstance(block, t.AudioContent):
            parts.append(f"[audio: {block.mime_type}, {len(block.data) * 3 // 4} bytes]")
        elif isinstance(block, t.EmbeddedResource):
            res = block.resource
            if isinstance(res, t.TextResourceContents):
                parts.append(f"[resource: {res.uri}]\n{res.text}")
            elif (res.mime_type or "").startswith("image/"):
                images.append(f"data:{res.mime_type};base64,{res.blob}")
                parts.append(f"[resource: {res.uri} ({res.mime_type}), shown as an image]")
            else:
                size = len(res.blob) * 3 // 4
                kind = res.mime_type or "binary"
                parts.append(f"[resource: {res.uri} ({kind}, {size} bytes, not shown)]")
        elif isinstance(block, t.ResourceLink):
            label = f" {block.name}" if block.name else ""
            parts.append(f"[resource link: {block.uri}{label}]")
        else:  # a content type this client does not know: kept as its JSON
            parts.append(json.dumps(_dump(block), ensure_ascii=False, sort_keys=True))
    # Servers SHOULD mirror structured content in a text block (the MCP spec, for clients like
    # this one); it is shown only when the result has no content to show otherwise.
    structured = getattr(result, "structured_content", None)
    if structured is not None and not parts and not images:
        parts.append(json.dumps(structured, ensure_ascii=False, sort_keys=True))
    return "\n".join(parts), images


def _dump(model: Any) -> Any:
    dump = getattr(model, "model_dump", None)
    return dump(mode="json", by_alias=True, exclude_none=True) if dump else str(model)


def describe_error(exc: BaseException) -> str:
    """One line for an error, looking inside exception groups (the SDK's task groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


# --------------------------------------------------------------------------- connections


class _Args(BaseModel):
    """An MCP tool's arguments: any JSON object (the server validates against its schema)."""

    model_config = ConfigDict(extra="allow")


@dataclass
class _Connection:
    """One server's connection, held open by a host task in the environment's task group."""

    name: str
    server: McpServer
    owner: McpEnvironment
    client: Client | None = None
    stop: anyio.Event | None = None
    error: str | None = None
    lock: anyio.Lock = field(default_factory=anyio.Lock)

    async def connect(self) -> Client:
        """The live client, (re)connecting when there is none."""
        async with self.lock:
            if self.client is not None:
                return self.client
            if self.server.unavailable is not None:
                self.error = self.server.unavailable
                raise ToolError(f'MCP server "{self.name}" is not available: {self.error}')
            tg = self.owner.task_group()
            limit_ms = self.server.connect_timeout_ms or self.owner.connect_timeout_ms
            try:
                with anyio.fail_after(limit_ms / 1000 if limit_ms > 0 else None):
                    client: Client = await tg.start(self._host)
            except TimeoutError:
                self.error = f"no answer within {limit_ms} ms"
                raise ToolError(
                    f'MCP server "{self.name}" is not available: {self.error}'
                ) from None
            except Exception as exc:
                self.error = describe_error(exc)
                raise ToolError(
                    f'MCP server "{self.name}" is not available: {self.error}'
                ) from None
            self.error = None
            return client

    async def _host(self, *, task_status: anyio.abc.TaskStatus[Client]) -> None:
        stop = anyio.Event()
        started = False
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await _open_client(self.server, stack, self.owner)
                self.client, self.stop = client, stop
                started = True
                task_status.started(client)
                await stop.wait()
        except Exception as exc:
            if not started:
                raise
            # After the start the host must not raise: it would cancel the session's body.
            _log.warning('[penguin] MCP server "%s" closed: %s', self.name, describe_error(exc))
        finally:
            if self.stop is stop:
                self.client = self.stop = None

    def drop(self, client: Client) -> None:
        """The connection ``client`` is broken: close it; the next call starts a new one."""
        if self.client is client and self.stop is not None:
            self.stop.set()
            self.client = self.stop = None

    def close(self) -> None:
        if self.stop is not None:
            self.stop.set()

    async def list_tools(self) -> list[Any]:
        client = await self.connect()
        tools: list[Any] = []
        cursor: str | None = None
        for _ in range(1000):  # a server whose cursor never ends cannot hang the session
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolResult:
        from mcp import MCPError

        client = await self.connect()
        try:
            result = await client.call_tool(tool, arguments)
        except MCPError as exc:
            if exc.code == _CONNECTION_CLOSED:
                self.drop(client)
                raise ToolError(
                    f'MCP server "{self.name}" closed the connection during the call '
                    f"({exc.message}); it is restarted for the next call"
                ) from None
            raise ToolError(f"MCP error {exc.code}: {exc.message}") from None
        except Exception as exc:
            self.drop(client)
            raise ToolError(
                f'MCP server "{self.name}" failed during the call ({describe_error(exc)}); '
                "it is restarted for the next call"
            ) from None
        text, images = convert_result(result)
        if result.is_error:
            raise ToolError(text or "the MCP tool reported an error")
        return ToolResult(text, images=images or None)


async def _open_client(
    server: McpServer, stack: contextlib.AsyncExitStack, owner: McpEnvironment
) -> Client:
    from mcp import Client

    transport: Any
    if server.command is not None:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=server.command[0],
            args=list(server.command[1:]),
            env=dict(server.env) if server.env else None,
            cwd=server.cwd or str(owner.workspace),
        )
        transport = stdio_client(params, errlog=stack.enter_context(owner.server_log(server)))
    else:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert server.url is not None
        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=dict(server.headers or {}),
                timeout=httpx2.Timeout(30.0, read=300.0),
            )
        )
        transport = streamable_http_client(server.url, http_client=http)
    return await stack.enter_async_context(Client(transport, mode=owner.mode))


# --------------------------------------------------------------------------- McpEnvironment


class McpEnvironment:
    """The tools of MCP ``servers`` as an Environment (R-MCP-1/2).  Use ``async with``: each
    server's connection is a task of the environment's task group.  ``Session.create(mcp=...)``
    builds and enters one for you.

    Servers are contacted when the tools are first listed (concurrently, each within
    ``connect_timeout_ms``).  A server that cannot be reached is reported as a warning of the
    ``engine`` logger and in ``errors``; its tools are those of ``recorded`` (the tool list a
    resumed session was recorded with), and calling them fails until the server answers again.
    """

    def __init__(
        self,
        servers: Mapping[str, McpServer],
        *,
        workspace: str | os.PathLike[str],
        default_timeout_ms: int = _DEFAULT_TIMEOUT_MS,
        max_output_length: int = _DEFAULT_MAX_OUTPUT,
        connect_timeout_ms: int = _DEFAULT_CONNECT_TIMEOUT_MS,
        recorded: Sequence[ToolDefinition] = (),
        mode: str = "auto",
    ) -> None:
        self._conns = {check_server_name(n): _Connection(n, s, self) for n, s in servers.items()}
        self.workspace = Path(workspace)
        self.default_timeout_ms = default_timeout_ms
        self.max_output_length = max_output_length
        self.connect_timeout_ms = connect_timeout_ms
        self.mode = mode
        self._recorded = list(recorded)
        self._scratchpad: Path | None = None
        self._local: LocalEnvironment | None = None
        self._read_only: set[str] = set()
        self._tg: anyio.abc.TaskGroup | None = None
        self._tg_cm: Any = None
        self.errors: dict[str, str] = {}

    @property
    def servers(self) -> dict[str, McpServer]:
        return {name: conn.server for name, conn in self._conns.items()}

    async def __aenter__(self) -> Self:
        self._tg_cm = anyio.create_task_group()
        self._tg = await self._tg_cm.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        for conn in self._conns.values():
            conn.close()
        tg_cm, self._tg_cm, self._tg = self._tg_cm, None, None
        result: bool | None = await tg_cm.__aexit__(exc_type, exc, tb)
        return result

    def task_group(self) -> anyio.abc.TaskGroup:
        if self._tg is None:
            raise RuntimeError(
                "use McpEnvironment inside `async with` (or pass mcp= to Session.create)"
            )
        return self._tg

    def bind_scratchpad(self, path: str | os.PathLike[str] | None) -> None:
        self._scratchpad = None if path is None else Path(path)
        if self._local is not None:
            self._local.bind_scratchpad(path)

    @contextlib.contextmanager
    def server_log(self, server: McpServer) -> Any:
        """Where a stdio server's stderr goes: ``<scratchpad>/mcp-logs/<name>-<n>.log`` (0600,
        one file per start of the server), so it neither garbles a terminal nor is lost; the
        null device without a scratchpad."""
        name = next((n for n, c in self._conns.items() if c.server is server), "server")
        if self._scratchpad is None:
            with open(os.devnull, "w") as sink:
                yield sink
            return
        from eventstore import create_private

        for n in range(1, 10_000):
            try:
                log = create_private(self._scratchpad / "mcp-logs" / f"{name}-{n}.log")
            except FileExistsError:
                continue
            with log:
                yield log
            return
        raise FileExistsError(f"no free log name for MCP server {name!r}")

    async def list_tools(self) -> list[ToolDefinition]:
        listed: dict[str, list[Any] | None] = {}

        async def one(name: str, conn: _Connection) -> None:
            try:
                listed[name] = await conn.list_tools()
            except Exception as exc:
                listed[name] = None
                self.errors[name] = conn.error or describe_error(exc)
                _log.warning(
                    '[penguin] MCP server "%s" is not available: %s', name, self.errors[name]
                )

        async with anyio.create_task_group() as tg:
            for name, conn in self._conns.items():
                tg.start_soon(one, name, conn)

        tools: list[Tool[Any]] = []
        seen: set[str] = set()
        for name, conn in self._conns.items():
            found = listed.get(name)
            if found is None:
                prefix = f"{name}{SEPARATOR}"
                for definition in self._recorded:
                    if definition.name.startswith(prefix) and definition.name not in seen:
                        seen.add(definition.name)
                        original = definition.name[len(prefix) :]
                        tools.append(self._tool(conn, definition.name, original, definition))
                continue
            for mcp_tool in found:
                full = tool_name(name, mcp_tool.name)
                if full in seen:
                    _log.warning(
                        '[penguin] MCP server "%s": tool %r is listed twice as %s; the first kept',
                        name,
                        mcp_tool.name,
                        full,
                    )
                    continue
                seen.add(full)
                definition = ToolDefinition(
                    name=full,
                    description=mcp_tool.description or mcp_tool.title or "",
                    parameters=dict(mcp_tool.input_schema or {"type": "object"}),
                )
                annotations = mcp_tool.annotations
                if annotations is not None and annotations.read_only_hint:
                    self._read_only.add(full)
                tools.append(self._tool(conn, full, mcp_tool.name, definition))
        self._local = LocalEnvironment(
            self.workspace,
            tools=tools,
            max_output_length=self.max_output_length,
            default_timeout_ms=self.default_timeout_ms,
            scratchpad=self._scratchpad,
        )
        return [tool.definition for tool in tools]

    def _tool(
        self, conn: _Connection, full: str, original: str, definition: ToolDefinition
    ) -> Tool[_Args]:
        async def run(args: _Args, ctx: object) -> ToolResult:
            return await conn.call(original, dict(args.model_extra or {}))

        return Tool(
            full,
            definition.description,
            _Args,
            run,
            timeout_ms=conn.server.timeout_ms,
            parameters=definition.parameters or {"type": "object"},
        )

    def tool_permission(self, name: str) -> Literal["r", "rw"] | None:
        if self._local is None or self._local.tool_permission(name) is None:
            return None
        return "r" if name in self._read_only else "rw"

    def has_tool(self, name: str) -> bool:
        return self._local is not None and self._local.tool_permission(name) is not None

    def execute(
        self, call: OmniMessage, *, signal: AbortSignal, approve: ApproveFn | None = None
    ) -> AsyncIterator[OmniMessage]:
        if self._local is None:
            raise RuntimeError("list the tools (list_tools) before executing a call")
        return self._local.execute(call, signal=signal, approve=approve)

    async def aclose(self) -> None:
        for conn in self._conns.values():
            conn.close()


# --------------------------------------------------------------------------- composition


class SessionTools:
    """A session's tools: ``environment`` plus the tools of MCP ``servers`` (calls routed by
    name), and the approval ``rules`` that wrap each run's approve callback (R-MCP-3).
    ``Session.create(mcp=..., approval_rules=...)`` builds one; the session enters it with its
    own lifetime (``open``/``close``), since each MCP connection is a task.
    """

    def __init__(
        self,
        environment: Environment,
        workspace: Path,
        *,
        mcp: Mapping[str, McpServer] | None = None,
        approval_rules: Mapping[str, str] | None = None,
        recorded: Sequence[ToolDefinition] = (),
    ) -> None:
        self.primary = environment
        self.servers = dict(mcp or {})
        timeout = getattr(environment, "default_timeout_ms", _DEFAULT_TIMEOUT_MS)
        limit = getattr(environment, "max_output_length", _DEFAULT_MAX_OUTPUT)
        self.mcp = (
            McpEnvironment(
                self.servers,
                workspace=workspace,
                default_timeout_ms=timeout if isinstance(timeout, int) else _DEFAULT_TIMEOUT_MS,
                max_output_length=limit if isinstance(limit, int) else _DEFAULT_MAX_OUTPUT,
                recorded=recorded,
            )
            if self.servers
            else None
        )
        # Rules the servers declare, then the explicit ones (which win on the same key).
        self.rules: dict[str, ApprovalRule] = {
            **mcp_rules(self.servers),
            **check_rules(approval_rules or {}),
        }

    async def open(self) -> None:
        if self.mcp is not None:
            await self.mcp.__aenter__()

    async def close(self) -> None:
        """Close the MCP connections; in the task that called ``open``."""
        if self.mcp is not None:
            await self.mcp.__aexit__(None, None, None)

    def approve(self, approve: ApproveFn | None) -> ApproveFn | None:
        return apply_rules(self.rules, approve)

    async def list_tools(self) -> list[ToolDefinition]:
        own = list(await self.primary.list_tools())
        if self.mcp is None:
            return own
        extra = await self.mcp.list_tools()
        names = {tool.name for tool in own}
        clash = [tool.name for tool in extra if tool.name in names]
        if clash:
            raise ValueError(f"MCP tool names clash with the environment's tools: {clash}")
        return own + extra

    def execute(
        self, call: OmniMessage, *, signal: AbortSignal, approve: ApproveFn | None
    ) -> AsyncIterator[OmniMessage]:
        payload = call.payload
        mcp = self.mcp
        if mcp is not None and isinstance(payload, ToolCallPayload) and mcp.has_tool(payload.name):
            return mcp.execute(call, signal=signal, approve=approve)
        return self.primary.execute(call, signal=signal, approve=approve)

    def tool_permission(self, name: str) -> Literal["r", "rw"] | None:
        found = self.mcp.tool_permission(name) if self.mcp is not None else None
        return found or self.primary.tool_permission(name)

    def bind_scratchpad(self, path: Path) -> None:
        if self.mcp is not None:
            self.mcp.bind_scratchpad(path)
        if isinstance(self.primary, BindsScratchpad):
            self.primary.bind_scratchpad(path)

    async def aclose(self) -> None:
        try:
            if self.mcp is not None:
                await self.mcp.aclose()
        finally:
            await self.primary.aclose()


def session_tools(
    environment: Environment,
    workspace: Path,
    *,
    mcp: Mapping[str, McpServer] | None,
    approval_rules: Mapping[str, str] | None,
    recorded: Sequence[ToolDefinition] = (),
) -> Environment:
    """``environment`` as a session uses it: unchanged without MCP servers and rules."""
    if not mcp and not approval_rules:
        return environment
    return SessionTools(
        environment, workspace, mcp=mcp, approval_rules=approval_rules, recorded=recorded
    )
