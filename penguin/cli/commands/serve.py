"""``penguin serve`` (SPEC §19): the HTTP server over this data root.

Owns: the command's options (bind, token, the model options of ``penguin run``, the default
approval mode of new sessions) and turning them into ``penguin.server.serve``.  Does not: serve
(``penguin.server``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from penguin.cli.config import load_config, mcp_servers, price_table, snapshot_settings
from penguin.cli.errors import CliError, errors_to_exit_codes
from penguin.cli.globalopts import globals_of, workspace_dir
from penguin.cli.options import (
    ApproveChoice,
    BaseUrlOpt,
    FsyncChoice,
    KeyEnvOpt,
    LlmOpt,
    ModelOpt,
    ScriptOpt,
)
from penguin.cli.terminal.safe import safe

if TYPE_CHECKING:
    pass

__all__ = ["serve"]

_FsyncOpt = Annotated[
    FsyncChoice,
    typer.Option(
        "--fsync",
        help="When session traces are made durable (R-TRACE-16): turn (at every turn's end), "
        "always (every record), rotate or never (faster; a crash of the machine may lose the "
        "last records).",
        case_sensitive=False,
    ),
]


def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option("--host", help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to bind.")] = 7364,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help="The API token [default: $PENGUIN_SERVER_TOKEN, else <home>/server-token, "
            "generated at first start].  Required to bind a non-loopback address.",
            show_default=False,
        ),
    ] = None,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace",
            "-w",
            help="Default workspace of new sessions [default: the current directory].",
            show_default=False,
        ),
    ] = None,
    approve: Annotated[
        ApproveChoice,
        typer.Option(
            "--approve",
            help="Default approval mode of new sessions: ask (answer over HTTP), allow-all, "
            "deny-all.",
            case_sensitive=False,
        ),
    ] = ApproveChoice.ask,
    script: ScriptOpt = None,
    llm: LlmOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    api_key_env: KeyEnvOpt = None,
    fsync: _FsyncOpt = FsyncChoice.turn,
    otlp: Annotated[
        str | None,
        typer.Option(
            "--otlp",
            help="Send the sessions as OpenTelemetry spans to this OTLP/HTTP endpoint "
            "(e.g. http://localhost:4318) as they run (needs the otel extra).",
            metavar="URL",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve sessions over HTTP with a lossless event stream (Ctrl-C or SIGTERM to stop).

    Prints the login URL (http://HOST:PORT/#token=...).  Programs send
    `Authorization: Bearer <token>`; see the README's "Server" section for the routes.
    """
    from penguin.cli.tasks.live import environment_for
    from penguin.cli.tasks.model import LlmOptions, build_llm, choose_model

    with errors_to_exit_codes():
        server_error, run_server = _server_module()
        g = globals_of(ctx)
        options = LlmOptions(script, llm.value if llm else None, model, base_url, api_key_env)
        # The configured model, else exit 2: a server never falls back to a demo script.
        config = load_config(g.root().home)
        choice = choose_model(options, config=config)
        build_llm(choice)  # fail at start on a bad script or a missing key

        def llm_factory(requested: str | None, endpoint: str | None = None) -> object:
            # ``endpoint``: a resumed session's recorded base URL (SPEC §23), kept over the
            # server's own so a restart never sends its model to another endpoint.
            if requested is not None and choice.script is None:
                changed = replace(choice, model=requested)
                if endpoint is not None:
                    changed = replace(changed, base_url=endpoint)
                return build_llm(changed)
            return build_llm(choice)

        if otlp is not None:
            if not otlp.startswith(("http://", "https://")):
                raise CliError("--otlp: an http:// or https:// URL")
            import importlib.util

            if importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is None:
                raise CliError("--otlp needs the otel extra: pip install 'penguin-engine[otel]'")
        ws = workspace_dir((workspace or Path.cwd()).expanduser())
        try:
            run_server(
                g.root(),
                host=host,
                port=port,
                token=token,
                llm_factory=llm_factory,
                environment_factory=environment_for,
                workspace=ws,
                approval=approve.value,
                fsync=fsync.value,
                mcp_servers=mcp_servers(config),
                # `snapshots = false` in the config holds for the server's sessions too.
                snapshots=snapshot_settings(config)["snapshots"] is not None,
                otlp=otlp,
                prices=price_table(config),
            )
        except server_error as exc:
            raise CliError(safe(str(exc))) from None


def _server_module() -> tuple[type[Exception], Any]:
    """``penguin.server``'s error root and ``serve``; exit 2 when the extra is missing."""
    try:
        from penguin.server import ServerError
        from penguin.server import serve as run_server
    except ImportError as exc:  # the `server` extra is not installed
        raise CliError(
            f"penguin serve needs the server extra: pip install 'penguin-engine[server]' "
            f"({safe(str(exc))})"
        ) from None
    return ServerError, run_server
