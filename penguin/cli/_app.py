"""The ``penguin`` command line (SPEC §16): the typer app and its command registry.

Owns: the app, the global options (``--home``, ``--project``, ``--agent``, ``--init``, accepted
before or after the command), the registry of commands (each lives in its own module and is
registered here in one line, loaded only when it runs or help lists it) and the console entry
point.  Exit codes: 0 ok, 1 the checked thing is bad, 2 usage or input error.  Does not:
implement any command.  Commands that only read (``sessions``, ``inspect``, ``show``,
``validate``, ``stats``, ``resume`` without ``-m``) never take a lock or modify a trace.
"""

from __future__ import annotations

import atexit
import gc
import sys
from collections.abc import Iterator, MutableMapping
from importlib import import_module
from pathlib import Path
from typing import Annotated, Any, Final

import typer
import typer.main
from typer.core import TyperGroup

from .errors import errors_to_exit_codes
from .globalopts import Globals, hoist_globals
from .terminal.console import quiet_stdout
from .terminal.logs import route_library_logs

__all__ = ["app", "main"]

# One line per command: its name -> "module:function" (or a typer sub-app).  A command's module
# is imported when the command runs or help lists it, so `penguin sessions` neither imports nor
# builds the other commands (issue 18: start-up).  In help order.
COMMANDS: Final[dict[str, str]] = {
    "chat": ".commands.chat:chat",
    "run": ".commands.run:run",
    "resume": ".commands.resume:resume",
    "sessions": ".commands.sessions:sessions",
    "search": ".commands.search:search",
    "show": ".commands.show:show",
    "inspect": ".commands.inspect:inspect",
    "validate": ".commands.validate:validate",
    "replay": ".commands.replay:replay",
    "stats": ".commands.stats:stats",
    "demo": ".commands.demo:demo",
    "query": ".commands.query:query",
    "export-parquet": ".commands.query:export_parquet",
    "serve": ".commands.serve:serve",
    "diff": ".commands.diff:diff",
    "repair": ".commands.repair:repair",
    "export": ".commands.export:export",
    "import": ".commands.import_:import_",
    "config": ".commands.config:config_app",
    "mcp": ".commands.mcp:mcp_app",
    "rewind": ".commands.rewind:rewind",
    "gc": ".commands.rewind:gc",
    "archive": ".commands.archive:archive",
}


def _build(name: str) -> Any:
    """The click command of ``COMMANDS[name]``, built by typer as ``app.command()`` would."""
    module, attr = COMMANDS[name].split(":")
    target = getattr(import_module(module, __package__), attr)
    if not isinstance(target, typer.Typer):
        one = typer.Typer(add_completion=False, rich_markup_mode=None)
        one.command(name)(target)
        target = one
    command = typer.main.get_command(target)
    command.name = name
    return command


class _LazyCommands(MutableMapping[str, Any]):
    """The group's commands: every registered name, each built on first look-up (click's "lazily
    loading subcommands"); help and "did you mean" see all names without loading any."""

    def __init__(self, built: MutableMapping[str, Any]) -> None:
        self._built = dict(built)

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in COMMANDS:
                raise KeyError(name)
            self._built[name] = _build(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._built[name]

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from (n for n in self._built if n not in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS.keys() | self._built.keys())

    def __contains__(self, name: object) -> bool:
        return name in COMMANDS or name in self._built


class _GlobalsAnywhere(TyperGroup):
    """Loads a command on first use, and accepts the global options after the command too:
    ``penguin run --home DIR …``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _LazyCommands(self.commands)

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


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("penguin-engine")
        except PackageNotFoundError:  # a source tree that was never installed
            number = "unknown"
        typer.echo(f"penguin {number}")
        raise typer.Exit(0)


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
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    """Global options go before or after the command: penguin inspect SESSION --home DIR.
    Without a command, on a terminal: the chat (`penguin chat`)."""
    route_library_logs()  # what the libraries log reaches stderr
    if project is not None or agent is not None:
        from eventstore import validate_id  # only here: help needs no trace store

        with errors_to_exit_codes():
            if project is not None:
                validate_id(project, what="project")
            if agent is not None:
                validate_id(agent, what="agent")
    ctx.obj = Globals(home=home, project=project, agent=agent, init=init)
    if ctx.invoked_subcommand is None:
        if not sys.stdin.isatty():
            typer.echo(ctx.get_help())
            raise typer.Exit(0)
        from .commands.chat import open_chat
        from .tasks.model import LlmOptions

        with errors_to_exit_codes():
            open_chat(ctx.obj, None, LlmOptions())


def main(argv: Any = None) -> None:
    """Console-script entry point: a closed stdout (``| head``) ends quietly, exit 0."""
    # At exit the interpreter's last collection walks every object the imports made (10-25 ms
    # of a 0.1 s command, issue 18); frozen objects are skipped, and the process is ending.
    atexit.register(gc.freeze)
    try:
        app(args=argv)
    except BrokenPipeError:
        quiet_stdout()
        raise SystemExit(0) from None
