"""``penguin import``: a trace file brought into the data root (SPEC §21).

Owns: its arguments, output and exit code.  Does not: implement it (``replay.import_trace``).  Registered in ``_app.COMMANDS``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from penguin.cli.errors import CliError, errors_to_exit_codes
from penguin.cli.globalopts import globals_of as _globals
from penguin.cli.options import JsonOpt
from penguin.cli.terminal.console import console as _console
from penguin.cli.terminal.console import write_json
from penguin.cli.terminal.safe import safe

if TYPE_CHECKING:
    pass

__all__: list[str] = []


def import_(
    ctx: typer.Context,
    file: Annotated[
        Path,
        typer.Argument(help="A trace file (.jsonl) to add to the data root.", show_default=False),
    ],
    new_id: Annotated[
        bool,
        typer.Option(
            "--new-id",
            help="Import under a new session id (e.g. a repaired copy of a session this root "
            "holds); the file's session_meta is rewritten to it.",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Add a trace file from elsewhere as a session of the data root.

    The file is validated (errors refuse it, exit 1, with the findings); its session id must be
    filename-safe and new to the root (--new-id gives it a new one).  It becomes file _001 of
    that session, in the date directory of its first timestamp; `penguin resume` then
    continues it.
    """
    from rich.text import Text

    from replay import ImportRefused, import_trace

    with errors_to_exit_codes():
        g = _globals(ctx)
        if not file.is_file():
            raise CliError(f"{safe(str(file), keep_newlines=False)}: no such file")
        try:
            result = import_trace(file, g.root(), project=g.project, agent=g.agent, new_id=new_id)
        except FileExistsError as exc:
            raise CliError(
                f"{exc}; import it beside that one with --new-id (e.g. a repaired copy)"
            ) from None
        except ImportRefused as exc:
            if as_json:
                write_json({"imported": False, "findings": [str(f) for f in exc.findings]})
            else:
                err = _console(stderr=True)
                for f in exc.findings:
                    err.print(Text(safe(str(f), keep_newlines=False)), soft_wrap=True)
                err.print(Text("penguin: import refused: the trace does not validate", style="red"))
            raise typer.Exit(1) from None
        if as_json:
            write_json(
                {
                    "imported": True,
                    "session_id": result.session_id,
                    "path": str(result.path),
                    "findings": [str(f) for f in result.findings],
                }
            )
        else:
            out = _console()
            for f in result.findings:
                out.print(Text(safe(str(f), keep_newlines=False)), soft_wrap=True)
            out.print(
                Text(
                    f"imported {result.session_id} as {safe(str(result.path), keep_newlines=False)}"
                ),
                soft_wrap=True,
            )
