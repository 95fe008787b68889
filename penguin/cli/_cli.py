"""The ``penguin`` command line (SPEC §16): the typer app and its command registry.

Owns: the app, the global options (``--home``, ``--project``, ``--agent``, ``--init``, accepted
before or after the command), the registry of commands (each lives in its own module and is
registered here in one line) and the console entry point.  Exit codes: 0 ok, 1 the checked
thing is bad, 2 usage or input error.  Does not: implement any command.  Commands that only
read (``sessions``, ``inspect``, ``show``, ``validate``, ``stats``, ``resume`` without ``-m``)
never take a lock or modify a trace.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from ._clikit import Globals, errors_to_exit_codes, hoist_globals, quiet_stdout
from ._logs import route_library_logs

__all__ = ["app", "main"]


class _GlobalsAnywhere(TyperGroup):
    """Accepts the global options after the command too: ``penguin run --home DIR …``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        def own(name: str) -> list[str]:
            command = self.commands.get(name)
            if command is None:
                return []
            return [opt for p in command.params for opt in getattr(p, "opts", ())]

        return super().parse_args(ctx, hoist_globals(args, own))


app = typer.Typer(
    name="penguin",
    cls=_GlobalsAnywhere,
    help=(
        "Run, inspect and replay event-sourced agent sessions recorded as JSONL traces.\n\n"
        "Sessions live under a data root (--home, else $PENGUIN_HOME, else ~/.penguin/data) "
        "as <project>/agents/<agent>/traces/<date>/<session>_<NNN>.jsonl.  New here?  Try "
        "`penguin demo`, then `penguin sessions` and `penguin show <id>`.  Set your model once "
        "with `penguin config set provider openai` and `penguin config set model NAME`.\n\n"
        "Exit codes: 0 ok; 1 the thing checked is bad (validation failed, replay diverged, run "
        "aborted or out of turns); 2 usage or input error (missing file, not a trace, unknown "
        "session, no model configured, session locked by another process)."
    ),
    invoke_without_command=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _main(
    ctx: typer.Context,
    home: Annotated[
        Path | None,
        typer.Option(
            "--home",
            help="Data root holding the sessions (overrides $PENGUIN_HOME; "
            "default ~/.penguin/data).",
            show_default=False,
        ),
    ] = None,
    project: Annotated[
        str | None,
        typer.Option(
            "--project",
            help="Project name: where `run` creates sessions; narrows the search of the "
            "other commands. [default: default_project for run]",
            show_default=False,
        ),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            help="Agent name, like --project. [default: default_agent for run]",
            show_default=False,
        ),
    ] = None,
    init: Annotated[
        bool,
        typer.Option(
            "--init",
            help="Create the data root if it does not exist (on a terminal you are asked).",
        ),
    ] = False,
) -> None:
    """Global options go before or after the command: penguin inspect SESSION --home DIR.
    Without a command, on a terminal: the chat (`penguin chat`)."""
    route_library_logs()  # what the libraries log reaches stderr
    with errors_to_exit_codes():
        from eventstore import validate_id  # here: `--help` needs no trace store

        if project is not None:
            validate_id(project, what="project")
        if agent is not None:
            validate_id(agent, what="agent")
    ctx.obj = Globals(home=home, project=project, agent=agent, init=init)
    if ctx.invoked_subcommand is None:
        if not sys.stdin.isatty():
            typer.echo(ctx.get_help())
            raise typer.Exit(0)
        from ._chat_cmd import open_chat
        from ._model import LlmOptions

        with errors_to_exit_codes():
            open_chat(ctx.obj, None, LlmOptions())


def _register() -> None:
    """One line per command; each module owns its command."""
    from . import (
        _chat_cmd,
        _config_cmd,
        _demo,
        _inspect_cmd,
        _replay_cmd,
        _resume,
        _run,
        _sessions,
        _show,
        _stats_cmd,
        _validate_cmd,
    )

    app.command()(_chat_cmd.chat)
    app.command()(_run.run)
    app.command()(_resume.resume)
    app.command()(_sessions.sessions)
    app.command()(_show.show)
    app.command()(_inspect_cmd.inspect)
    app.command()(_validate_cmd.validate)
    app.command()(_replay_cmd.replay)
    app.command()(_stats_cmd.stats)
    app.command()(_demo.demo)
    app.add_typer(_config_cmd.config_app, name="config")


_register()


def main(argv: Any = None) -> None:
    """Console-script entry point: a closed stdout (``| head``) ends quietly, exit 0."""
    try:
        app(args=argv)
    except BrokenPipeError:
        quiet_stdout()
        raise SystemExit(0) from None


from . import _query as _query  # noqa: E402  (registers `query` and `export-parquet` on app)
from . import _serve as _serve  # noqa: E402  (registers `penguin serve` on `app`)
from . import _tracetools as _tracetools  # noqa: E402  (registers diff, repair, export, import)
