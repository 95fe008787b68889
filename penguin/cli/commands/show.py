"""``penguin show SESSION``: the conversation, in full and readable.

Owns: the command.  Does not: build or render the transcript (``views.transcript``).
"""

from __future__ import annotations

from typing import Annotated

import typer

from penguin.cli.errors import errors_to_exit_codes
from penguin.cli.globalopts import globals_of
from penguin.cli.options import JsonOpt
from penguin.cli.targets import resolve_target
from penguin.cli.terminal.console import write_json

__all__ = ["show"]


def show(
    ctx: typer.Context,
    target: Annotated[
        str,
        typer.Argument(
            help="A session id (or unique prefix / short id), a trace file or a directory.",
            show_default=False,
            metavar="SESSION_OR_PATH",
        ),
    ],
    as_json: JsonOpt = False,
) -> None:
    """Print the conversation: your prompts, the answers (Markdown), thinking (dimmed), tool
    calls and their outputs — without the trace's internals (see `inspect` for those)."""
    with errors_to_exit_codes():
        from eventstore import iter_trace
        from penguin.cli.diagnose import quiet_reader
        from penguin.cli.terminal.console import out_console
        from penguin.cli.views.transcript import render_transcript, transcript

        t = resolve_target(target, globals_of(ctx))
        source = list(t.files) if len(t.files) > 1 else t.files[0]
        with quiet_reader():
            entries = transcript(iter_trace(source))
        if as_json:
            write_json(
                {
                    "session_id": t.session_id,
                    "entries": [
                        {"kind": e.kind, "text": e.text, "detail": e.detail} for e in entries
                    ],
                }
            )
            return
        console = out_console()
        if console.is_terminal:
            render_transcript(console, entries)
            return
        # Piped: Markdown fills its width (100 keeps it readable) and pads every line with
        # spaces to it; a file or a pager wants the text without them.
        console.width = 100
        with console.capture() as captured:
            render_transcript(console, entries)
        text = "\n".join(line.rstrip() for line in captured.get().split("\n"))
        console.file.write(text)
        console.file.flush()
