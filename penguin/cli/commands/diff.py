"""``penguin diff A B``: where two traces diverge (SPEC §21).

Owns: its arguments, output and exit code.  Does not: implement it (``replay.diff_traces``).  Registered in ``_app.COMMANDS``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import typer

from penguin.cli.errors import errors_to_exit_codes
from penguin.cli.globalopts import globals_of as _globals
from penguin.cli.options import JsonOpt, SessionOrPathArg
from penguin.cli.targets import resolve_target
from penguin.cli.terminal.console import console as _console
from penguin.cli.terminal.console import write_json
from penguin.cli.terminal.safe import safe

if TYPE_CHECKING:
    from rich.text import Text

    from replay import Difference

__all__: list[str] = []


_SHOWN: Final = 20


def _difference(d: Difference) -> Text:
    from rich.text import Text

    return Text(safe(str(d)))


def diff(
    ctx: typer.Context, a: SessionOrPathArg, b: SessionOrPathArg, as_json: JsonOpt = False
) -> None:
    """Compare two sessions by structure, not by line.

    Aligns runs (by their prompt), turns and tool calls; ignores timestamps, ids, paths and
    durations.  Prints the first divergence (named by run, turn and call, with the file:line
    of each side), the other differences and a summary; exit 0 when equal, 1 when they
    differ.
    """
    from rich.text import Text

    from replay import diff_traces

    with errors_to_exit_codes():
        g = _globals(ctx)
        result = diff_traces(resolve_target(a, g).files, resolve_target(b, g).files)
        if as_json:
            write_json(result.as_json())
        else:
            out = _console()
            if result.equal:
                out.print(Text("equal", style="green"))
            else:
                first, *rest = result.differences
                out.print(Text("first divergence: ", style="red") + _difference(first))
                for d in rest[:_SHOWN]:
                    out.print(_difference(d), soft_wrap=True)
                if len(rest) > _SHOWN:
                    out.print(Text(f"… and {len(rest) - _SHOWN} more (--json lists all)"))
            out.print(Text(result.summary_line(), style="dim"), soft_wrap=True)
        raise typer.Exit(0 if result.equal else 1)
