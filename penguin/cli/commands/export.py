"""``penguin export``: a session as Markdown, HTML or JSONL (SPEC §21).

Owns: its arguments and output.  Does not: implement it (``replay.export_trace``).  Registered in ``_app.COMMANDS``.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from penguin.cli.errors import CliError, errors_to_exit_codes
from penguin.cli.globalopts import globals_of as _globals
from penguin.cli.options import SessionOrPathArg
from penguin.cli.targets import resolve_target
from penguin.cli.terminal.console import console as _console
from penguin.cli.terminal.safe import safe, safe_json_bytes

if TYPE_CHECKING:
    pass

__all__: list[str] = []


class ExportChoice(StrEnum):
    md = "md"
    html = "html"
    jsonl = "jsonl"


def export(
    ctx: typer.Context,
    source: SessionOrPathArg,
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
            shown = safe(str(out), keep_newlines=False)
            try:
                f = open(out, "x", encoding="utf-8", errors="surrogateescape")  # noqa: SIM115
            except FileExistsError:
                raise CliError(
                    f"{shown}: already exists (export never overwrites a file: choose another "
                    "--out FILE, or remove this one)"
                ) from None
            except IsADirectoryError:
                raise CliError(f"{shown}: is a directory; --out names a file") from None
            except FileNotFoundError:
                raise CliError(f"{shown}: no such directory to write into") from None
            except PermissionError:
                raise CliError(f"{shown}: permission denied") from None
            with f:
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
