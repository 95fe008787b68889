"""``penguin mcp serve [--http]``: the read-only trace tools as an MCP server (R-MCP-5).

Owns: the command's options and exit codes.  Does not: serve (``penguin._mcp_serve``).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from penguin.cli.errors import CliError, errors_to_exit_codes
from penguin.cli.globalopts import globals_of
from penguin.cli.terminal.safe import safe

__all__ = ["mcp_app"]

mcp_app = typer.Typer(
    help="Model Context Protocol: serve this data root's trace tools to other agents.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


@mcp_app.callback()
def _group() -> None:
    """Model Context Protocol: serve this data root's trace tools to other agents."""
    # A callback keeps `mcp` a group with one sub-command (typer would fold it into `serve`).


@mcp_app.command("serve")
def serve(
    ctx: typer.Context,
    http: Annotated[
        bool,
        typer.Option(
            "--http",
            help="Serve streamable HTTP on 127.0.0.1 (needs the server token) instead of stdio.",
        ),
    ] = False,
    port: Annotated[
        int, typer.Option("--port", help="HTTP port on 127.0.0.1 (0: a free one).")
    ] = 7365,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help="The token HTTP clients send as `Authorization: Bearer <token>` [default: "
            "$PENGUIN_SERVER_TOKEN, else <home>/server-token, as `penguin serve`].",
            show_default=False,
        ),
    ] = None,
    no_auth: Annotated[
        bool,
        typer.Option(
            "--no-auth",
            help="HTTP without a token (for tests on this machine only; Host and Origin are "
            "still checked).",
        ),
    ] = False,
) -> None:
    """Serve the read-only trace tools (list and search sessions, transcript, request_at,
    validate, diff, SQL) over MCP: stdio by default, for an agent that starts this command;
    --http for a local HTTP endpoint (http://127.0.0.1:PORT/mcp)."""
    import anyio

    with errors_to_exit_codes():
        try:
            from penguin import _mcp_serve
        except ImportError as exc:
            raise CliError(
                f"penguin mcp needs the mcp extra: pip install 'penguin-engine[mcp]' "
                f"({safe(str(exc))})"
            ) from None
        root = globals_of(ctx).root()
        if not http:
            if no_auth or token is not None:
                raise CliError("--token and --no-auth apply to --http only")
            anyio.run(_mcp_serve.serve_stdio, root)
            return
        secret: str | None = None
        if not no_auth:
            secret = _mcp_serve.server_token(root, token)

        def ready(url: str) -> None:
            auth = "no token (--no-auth)" if secret is None else "Authorization: Bearer <token>"
            print(f"penguin mcp: serving {url} ({auth})", file=sys.stderr, flush=True)

        try:
            anyio.run(lambda: _mcp_serve.serve_http(root, port=port, token=secret, ready=ready))
        except OSError as exc:
            raise CliError(f"cannot serve on 127.0.0.1:{port}: {safe(str(exc))}") from None
        except KeyboardInterrupt:
            return
