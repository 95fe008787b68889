"""Running the app under uvicorn (``penguin serve``, R-SRV-1, R-SRV-14).

Owns: refusing a public bind without an explicit, strong token, binding the port (a busy port
is a clear error), printing the login URL, and SIGTERM:
stop accepting tasks, abort running ones as a user abort would, end the streams, exit 0 within
10 s; the garbage collector's thresholds while serving.  Does not: build the app
(``create_app``).
"""

from __future__ import annotations

import asyncio
import errno
import gc
import ipaddress
import socket
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType

import uvicorn

from engine import McpServer
from eventstore import DataRoot, FsyncPolicy
from projections import Price

from ._app import create_app
from ._context import ServerContext
from ._exceptions import ServerError
from ._host import EnvironmentFactory, LLMFactory
from ._hosted import ApprovalMode
from ._protocol import uvicorn_config

__all__ = ["serve"]

# A server holding many sessions allocates a young object per streamed event, and its heap (the
# sessions' projections) keeps growing: with CPython's default (700, 10, 10) the collector
# runs a young pass every few hundred events and a full pass over that whole heap every ~70,000
# allocations, stalling every stream at once.  Measured with ``bench_server`` (100 sessions, 2
# subscribers each): p99 write->client 98-128 ms -> 59-76 ms, 15-30% more events/s.
SERVE_GC_THRESHOLDS = (50_000, 20, 100)
# A token guessable by brute force over the network must not guard a public bind (issue 29).
MIN_PUBLIC_TOKEN = 16


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Server(uvicorn.Server):
    def __init__(
        self, config: uvicorn.Config, ctx: ServerContext, announce: Callable[[int], None] | None
    ) -> None:
        super().__init__(config)
        self._ctx = ctx
        self._announce = announce

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self.servers and self._announce is not None:
            # The bound port (``--port 0`` picks a free one).
            port = self.servers[0].sockets[0].getsockname()[1]
            self._announce(port)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Runs between bytecodes of the loop's thread: hand the work to the loop itself.
        loop = self._ctx.loop
        if loop is not None and not self.should_exit:
            loop.call_soon_threadsafe(self._ctx.begin_shutdown)
        super().handle_exit(sig, frame)
        # uvicorn re-raises a captured signal after its graceful shutdown, which would end the
        # process by the signal; a clean stop exits 0 (R-SRV-14).
        self._captured_signals.clear()


def serve(
    root: DataRoot | str | Path | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 7364,
    token: str | None = None,
    llm_factory: LLMFactory | None = None,
    environment_factory: EnvironmentFactory | None = None,
    workspace: str | Path | None = None,
    approval: ApprovalMode = "ask",
    log_level: str = "warning",
    announce: Callable[[str], None] | None = None,
    fsync: FsyncPolicy = "turn",
    mcp_servers: Mapping[str, McpServer] | None = None,
    snapshots: bool = True,
    otlp: str | None = None,
    prices: Mapping[str, Price] | None = None,
    subagents: bool = False,
) -> None:
    """Serve until SIGINT/SIGTERM (which abort running tasks as a user abort would; exit
    within 10 s).  Once bound, ``announce(url)`` gets the login URL (``port=0`` binds a free
    port; the URL has the real one); without it the URL is printed on stderr."""
    if not _loopback(host) and not token:
        raise ServerError(
            f"refusing to bind {host} (not a loopback address) without an explicit --token"
        )
    if not _loopback(host) and token is not None and len(token) < MIN_PUBLIC_TOKEN:
        raise ServerError(
            f"refusing to bind {host} (not a loopback address) with a {len(token)}-character "
            f"token: use at least {MIN_PUBLIC_TOKEN} random characters "
            '(e.g. python -c "import secrets; print(secrets.token_urlsafe(32))")'
        )
    sock = _bind(host, port)
    app = create_app(
        root,
        token=token,
        llm_factory=llm_factory,
        environment_factory=environment_factory,
        workspace=workspace,
        approval=approval,
        fsync=fsync,
        mcp_servers=mcp_servers,
        snapshots=snapshots,
        otlp=otlp,
        prices=prices,
        subagents=subagents,
    )
    ctx: ServerContext = app.state.penguin
    shown = f"[{host}]" if ":" in host else host

    def bound(actual: int) -> None:
        url = f"http://{shown}:{actual}/#token={ctx.token}"
        if announce is None:
            print(
                f"penguin serve: listening on http://{shown}:{actual}", file=sys.stderr, flush=True
            )
            print(f"penguin serve: open {url}", file=sys.stderr, flush=True)
        else:
            announce(url)

    config = uvicorn_config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        lifespan="on",
        timeout_graceful_shutdown=5,
        access_log=False,
    )
    server = _Server(config, ctx, bound)
    before = gc.get_threshold()
    gc.set_threshold(*SERVE_GC_THRESHOLDS)
    try:
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        gc.set_threshold(*before)
        sock.close()


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything starts, so a busy port is one clear line
    naming it (uvicorn's own bind logs a traceback-like error and exits 1/3)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise ServerError(f"cannot bind {host}:{port}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ServerError(
                f"port {port} on {host} is already in use (another penguin serve?): "
                "stop it or choose another port with --port"
            ) from None
        raise ServerError(f"cannot bind {host}:{port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock
