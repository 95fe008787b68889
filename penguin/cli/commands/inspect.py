"""``penguin inspect``: the forensic view of a session's trace (R-CLI-4).

Owns: the command (file table, state, context, timeline, diagnostics; ``--records``,
``--follow``, ``--children``).  Does not: build the view (``views.inspect``) or tail files (``follow``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from penguin.cli.errors import CliError, errors_to_exit_codes
from penguin.cli.globalopts import globals_of
from penguin.cli.options import JsonOpt
from penguin.cli.targets import resolve_target
from penguin.cli.terminal.console import err_console, out_console, write_json
from penguin.cli.terminal.safe import safe, safe_json_bytes

if TYPE_CHECKING:
    from penguin.cli.globalopts import Globals
    from penguin.cli.targets import Target
    from penguin.cli.views.inspect import NumberedFile

__all__ = ["inspect"]


def inspect(
    ctx: typer.Context,
    target: Annotated[
        str,
        typer.Argument(
            help="A session id, a trace file, or a directory holding one session's files.",
            show_default=False,
            metavar="SESSION_OR_PATH",
        ),
    ],
    file: Annotated[
        int | None,
        typer.Option(
            "--file", help="Only file N of the session (its _NNN index).", show_default=False
        ),
    ] = None,
    records: Annotated[
        bool,
        typer.Option(
            "--records",
            help="List every record with its file:ordinal "
            "coordinate (as `fork` takes it) and line number.",
        ),
    ] = False,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Keep printing records as a live session "
            "writes them (across file rotations) until Ctrl-C.",
        ),
    ] = False,
    children: Annotated[
        bool,
        typer.Option(
            "--children",
            help="Also show every subagent session this trace "
            "points to, indented under the pointer's file:ordinal (recursively; "
            "with --json, as nested `children`).",
        ),
    ] = False,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            help="Show the exact request sent at the request_begin FILE:ORDINAL (or the model "
            "context after any other record), synthesized messages marked with *.",
            show_default=False,
            metavar="FILE:ORDINAL",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show what a session's trace holds: files and record counts, the state, the model
    context, a timeline of request spans with tool calls, approvals, outputs, compactions and
    aborts, and what the reader skipped.  Reads only; takes no lock.  A subagent pointer that
    cannot be followed (--children) is reported, not an error."""
    with errors_to_exit_codes():
        g = globals_of(ctx)
        _check_views(children=children, records=records, follow=follow, at=at, file=file)
        t = resolve_target(target, g)
        if at is not None:
            from penguin.cli.views.at import show_at

            point = show_at(out_console(), t.files, at, as_json=as_json)
            if point is not None:
                write_json(point)
            return
        numbered, selected = _read(t, file)
        if follow:
            _follow(numbered[selected[0] if selected else -1].path, as_json=as_json)
            return
        chosen = numbered if selected is None else [numbered[i] for i in selected]
        if records:
            _records_view(t, chosen, as_json=as_json)
        else:
            _session_view(g, t, numbered, selected, children=children, as_json=as_json)


def _check_views(
    *, children: bool, records: bool, follow: bool, at: str | None, file: int | None
) -> None:
    if children and (records or follow):
        raise CliError(
            "--children shows the session view: it does not combine with --records or --follow"
        )
    if at is not None and (records or follow or children or file is not None):
        raise CliError("--at shows one point: it does not combine with other views")


def _read(t: Target, file: int | None) -> tuple[list[NumberedFile], list[int] | None]:
    """The files read with line numbers, and the positions ``--file`` selects (None: all)."""
    from penguin.cli.views.inspect import read_numbered

    numbered = [read_numbered(path) for path in t.files]
    if not any(nf.records for nf in numbered):
        what = "empty" if all(nf.size == 0 for nf in numbered) else "holds no record"
        shown = ", ".join(safe(str(nf.path), keep_newlines=False) for nf in numbered)
        raise CliError(f"{shown}: {what} trace file (crash residue or damage; nothing to show)")
    if file is None:
        return numbered, None
    positions = [i for i, nf in enumerate(numbered) if nf.index == file]
    if not positions:
        have = ", ".join(str(nf.index) for nf in numbered)
        raise CliError(f"no file {file} in {safe(t.label)} (files: {have})")
    return numbered, positions


def _records_view(t: Target, chosen: list[NumberedFile], *, as_json: bool) -> None:
    from penguin.cli.views.inspect import iter_rows, record_row, render_records

    if as_json:
        write_json(
            {
                "session_id": t.session_id,
                "records": [record_row(*row) for row in iter_rows(chosen)],
            }
        )
    else:
        render_records(out_console(), chosen)


def _session_view(
    g: Globals,
    t: Target,
    numbered: list[NumberedFile],
    selected: list[int] | None,
    *,
    children: bool,
    as_json: bool,
) -> None:
    from penguin.cli.views.inspect import (
        build_inspection,
        find_session_files,
        follow_children,
        render_children,
        render_inspection,
    )

    insp = build_inspection(numbered, selected=selected)
    if not children:
        if as_json:
            write_json(insp.as_json())
        else:
            render_inspection(out_console(), insp, label=t.label)
        return
    root = g.root()

    def find(session_id: str) -> list[Path]:
        return find_session_files(
            session_id, near=t.files, root=root, project=t.project, agent=t.agent
        )

    seen = {t.session_id} if t.session_id else set()
    views = follow_children(insp, find, seen=seen)
    if as_json:
        write_json(insp.as_json() | {"children": [v.as_json() for v in views]})
    else:
        out = out_console()
        render_inspection(out, insp, label=t.label)
        render_children(out, views)


def _follow(path: Path, *, as_json: bool) -> None:
    import anyio
    from rich.text import Text

    from eventstore import OmniMessage, encode
    from penguin.cli.follow import follow
    from penguin.cli.views.inspect import describe

    out = out_console()

    def emit(index: int, ordinal: int, line: int, record: OmniMessage) -> None:
        if as_json:
            sys.stdout.write(safe_json_bytes(encode(record)).decode("utf-8") + "\n")
        else:
            coord = f"{index}:{ordinal}"
            out.print(Text(f"{coord:>7} ", style="bold") + Text(describe(record)), soft_wrap=True)
        sys.stdout.flush()

    err_console().print(
        Text(f"following {safe(str(path), keep_newlines=False)} (Ctrl-C to stop)", style="dim"),
        soft_wrap=True,
    )
    if not _being_written(path):
        err_console().print(
            Text(
                "nobody is writing this session now (no live process holds its lock): "
                "waiting for new records; Ctrl-C to stop",
                style="yellow",
            ),
            soft_wrap=True,
        )
    anyio.run(follow, path, emit)


def _being_written(path: Path) -> bool:
    from penguin.cli.listing import writer_holds
    from penguin.cli.tracefiles import trace_name

    return trace_name(path) is not None and writer_holds(path)
