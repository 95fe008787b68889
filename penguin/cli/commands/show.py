"""``penguin show SESSION``: the conversation, in full and readable.

Owns: the command.  Does not: build or render the transcript (``views.transcript``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from penguin.cli.errors import errors_to_exit_codes
from penguin.cli.globalopts import globals_of
from penguin.cli.options import JsonOpt
from penguin.cli.targets import resolve_target
from penguin.cli.terminal.console import write_json

if TYPE_CHECKING:
    from eventstore import OmniMessage
    from projections import SessionState

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
    """Print the session's status (running, completed, interrupted…) and the conversation:
    your prompts, the answers (Markdown), thinking (dimmed), tool calls and their outputs —
    without the trace's internals (see `inspect` for those)."""
    with errors_to_exit_codes():
        from rich.text import Text

        from eventstore import iter_trace
        from penguin.cli.diagnose import quiet_reader
        from penguin.cli.terminal.console import out_console
        from penguin.cli.views.transcript import render_transcript, transcript
        from projections import SessionState

        t = resolve_target(target, globals_of(ctx))
        source = list(t.files) if len(t.files) > 1 else t.files[0]
        state = SessionState()
        with quiet_reader():
            entries = transcript(_folding(state, iter_trace(source)))
        status = _status(state, t.files[-1])
        if as_json:
            write_json(
                {
                    "session_id": t.session_id,
                    "status": status,
                    "entries": [
                        {"kind": e.kind, "text": e.text, "detail": e.detail} for e in entries
                    ],
                }
            )
            return
        console = out_console()
        console.print(Text(f"status: {status}", style="dim"))
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


def _folding(state: SessionState, records: Iterable[OmniMessage]) -> Iterator[OmniMessage]:
    """``records`` unchanged, each folded into ``state`` on the way (one read for both)."""
    for record in records:
        state.apply(record)
        yield record


def _status(state: SessionState, latest: Path) -> str:
    """The one status (R-SET-5): the records' rule, the lock probed by the lock itself."""
    from penguin.cli.listing import writer_holds
    from penguin.cli.tracefiles import trace_name

    return state.status_given(locked=trace_name(latest) is not None and writer_holds(latest))
