"""The trace-tool commands (SPEC §21): ``diff``, ``repair``, ``export``, ``import``.

Owns: their arguments, output shapes and exit codes.  Does not: implement them (``replay``
does: ``diff_traces``, ``repair_trace``, ``export_trace``, ``import_trace``).  Registered in
``_cli.COMMANDS``.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final

import typer

from ._clikit import CliError, errors_to_exit_codes, resolve_target, write_json
from ._clikit import console as _console
from ._options import JsonOpt
from ._run import globals_of as _globals
from ._safe import safe, safe_json_bytes

if TYPE_CHECKING:
    from rich.text import Text

    from replay import (
        Difference,
    )

__all__: list[str] = []

_SHOWN: Final = 20

Target = Annotated[
    str,
    typer.Argument(
        help="A session id, a trace file, or a directory holding one session's files.",
        show_default=False,
        metavar="SESSION_OR_PATH",
    ),
]


def _difference(d: Difference) -> Text:
    from rich.text import Text

    return Text(safe(str(d)))


def diff(ctx: typer.Context, a: Target, b: Target, as_json: JsonOpt = False) -> None:
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


def repair(
    ctx: typer.Context,
    source: Target,
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


class ExportChoice(StrEnum):
    md = "md"
    html = "html"
    jsonl = "jsonl"


def export(
    ctx: typer.Context,
    source: Target,
    format: Annotated[
        ExportChoice,
        typer.Option("--format", help="md, html (one self-contained file) or jsonl."),
    ] = ExportChoice.md,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Write to FILE (never overwritten) instead of stdout.", metavar="FILE"
        ),
    ] = None,
    redact: Annotated[
        str | None,
        typer.Option(
            "--redact",
            help="Mask every match of this regular expression in every string with [redacted].",
            metavar="REGEX",
        ),
    ] = None,
) -> None:
    """Export a session as a readable transcript or as one JSONL stream.

    Markdown, or one HTML file that loads nothing and runs no script (every string escaped;
    remote images shown as links, not fetched), or the records of all files concatenated.
    On a terminal the output is escaped; use --out or a pipe for the raw text.
    """
    from rich.text import Text

    from replay import export_trace

    with errors_to_exit_codes():
        files = resolve_target(source, _globals(ctx)).files
        if redact is not None:
            import re

            try:
                re.compile(redact)
            except re.error as exc:
                raise CliError(f"--redact: invalid regular expression: {exc}") from None
        text = export_trace(files, format=format.value, redact=redact)
        if out is not None:
            with open(out, "x", encoding="utf-8", errors="surrogateescape") as f:
                f.write(text)
            _console(stderr=True).print(
                Text(f"wrote {safe(str(out), keep_newlines=False)}", style="dim"), soft_wrap=True
            )
            return
        data = text.encode("utf-8", errors="surrogateescape")
        if sys.stdout.isatty():
            data = safe(text).encode("utf-8", errors="surrogateescape")
        elif format is ExportChoice.jsonl:
            data = safe_json_bytes(data)
        sys.stdout.buffer.write(data)
        sys.stdout.flush()


def import_(
    ctx: typer.Context,
    file: Annotated[
        Path,
        typer.Argument(help="A trace file (.jsonl) to add to the data root.", show_default=False),
    ],
    as_json: JsonOpt = False,
) -> None:
    """Add a trace file from elsewhere as a session of the data root.

    The file is validated (errors refuse it, exit 1, with the findings); its session id must be
    filename-safe and new to the root.  It becomes file _001 of that session, in the date
    directory of its first timestamp; `penguin resume` then continues it.
    """
    from rich.text import Text

    from replay import ImportRefused, import_trace

    with errors_to_exit_codes():
        g = _globals(ctx)
        if not file.is_file():
            raise CliError(f"{safe(str(file), keep_newlines=False)}: no such file")
        try:
            result = import_trace(file, g.root(), project=g.project, agent=g.agent)
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
