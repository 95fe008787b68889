"""``penguin repair``: a repaired copy of a damaged trace (SPEC §21).

Owns: its arguments, output and exit code.  Does not: implement it (``replay.repair_trace``).  Registered in ``_app.COMMANDS``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from penguin.cli.errors import errors_to_exit_codes
from penguin.cli.globalopts import globals_of as _globals
from penguin.cli.options import JsonOpt, SessionOrPathArg
from penguin.cli.targets import resolve_target
from penguin.cli.terminal.console import console as _console
from penguin.cli.terminal.console import write_json
from penguin.cli.terminal.safe import safe

if TYPE_CHECKING:
    pass

__all__: list[str] = []


def repair(
    ctx: typer.Context,
    source: SessionOrPathArg,
    into: Annotated[
        Path,
        typer.Option(
            "--into",
            help="Directory that receives the repaired copy (created; files are never "
            "overwritten).",
            show_default=False,
            metavar="DIR",
        ),
    ],
    as_json: JsonOpt = False,
) -> None:
    """Write a repaired copy of a damaged session; the source is never touched.

    Cuts a torn tail, drops malformed lines and each record the validator rejects, leaves a
    crash-residue file out and closes a dangling request or compaction as resume would.
    Prints every change; the copy then passes `validate`.  Exit 1 (and nothing written) when
    the source needed no repair.
    """
    from rich.text import Text

    from replay import repair_trace, validate_session

    with errors_to_exit_codes():
        path = Path(source)
        if path.is_file():  # damage may make a file look like no trace at all: repair it anyway
            files = [path]
        else:
            files = resolve_target(source, _globals(ctx)).files
        result = repair_trace(files, into)
        findings = validate_session(result.files) if result.files else []
        errors = [f for f in findings if f.severity == "error"]
        if as_json:
            write_json(
                {
                    "changed": result.changed,
                    "changes": [
                        {"path": str(c.path), "line": c.line, "action": c.action}
                        for c in result.changes
                    ],
                    "files": [str(f) for f in result.files],
                    "errors_after": [str(f) for f in errors],
                }
            )
        else:
            out = _console()
            for change in result.changes:
                out.print(Text(safe(str(change), keep_newlines=False)), soft_wrap=True)
            if not result.changed:
                out.print(Text("nothing to repair; no copy written"))
            else:
                verdict = "valid" if not errors else f"INVALID ({len(errors)} error(s))"
                out.print(
                    Text(
                        f"{len(result.changes)} change(s); wrote {len(result.files)} file(s) "
                        f"into {safe(str(into), keep_newlines=False)}; the copy is {verdict}"
                    ),
                    soft_wrap=True,
                )
        raise typer.Exit(0 if result.changed else 1)
