"""``penguin export``: a session as Markdown, HTML or JSONL (SPEC §21), or as OpenTelemetry
spans sent to an OTLP/HTTP endpoint.

Owns: its arguments and output.  Does not: implement it (``replay.export_trace``,
``replay.otel.export_otlp``).  Registered in ``_app.COMMANDS``.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

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
    otlp = "otlp"


def export(
    ctx: typer.Context,
    source: SessionOrPathArg,
    format: Annotated[
        ExportChoice,
        typer.Option(
            "--format",
            help="md, html (one self-contained file), jsonl, or otlp (spans sent to --endpoint).",
        ),
    ] = ExportChoice.md,
    endpoint: Annotated[
        str | None,
        typer.Option(
            "--endpoint",
            help="With --format otlp: the OTLP/HTTP endpoint (a base URL such as "
            "http://localhost:4318, or its /v1/traces URL).",
            metavar="URL",
        ),
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option(
            "--header",
            help="With --format otlp: a header for the endpoint, NAME=VALUE (repeatable).",
            metavar="NAME=VALUE",
        ),
    ] = None,
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
        if format is ExportChoice.otlp or endpoint is not None:
            _export_otlp(ctx, files, format, endpoint, header or [], out, redact)
            return
        if redact is not None:
            import re

            try:
                re.compile(redact)
            except re.error as exc:
                raise CliError(f"--redact: invalid regular expression: {exc}") from None
        kind: Literal["md", "html", "jsonl"] = format.value  # type: ignore[assignment]
        text = export_trace(files, format=kind, redact=redact)
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


def _export_otlp(
    ctx: typer.Context,
    files: list[Path],
    format: ExportChoice,
    endpoint: str | None,
    headers: list[str],
    out: Path | None,
    redact: str | None,
) -> None:
    from rich.text import Text

    from replay.otel import OtelError, export_otlp

    if format is not ExportChoice.otlp:
        raise CliError("--endpoint goes with --format otlp")
    if endpoint is None:
        raise CliError("--format otlp needs --endpoint URL (an OTLP/HTTP endpoint)")
    if not endpoint.startswith(("http://", "https://")):
        raise CliError("--endpoint: an http:// or https:// URL")
    if out is not None or redact is not None:
        raise CliError("--out and --redact do not apply to --format otlp (spans are sent)")
    pairs: dict[str, str] = {}
    for h in headers:
        name, sep, value = h.partition("=")
        if not sep or not name.strip():
            raise CliError(f"--header {safe(h, keep_newlines=False)!r}: expected NAME=VALUE")
        pairs[name.strip()] = value
    root = _globals(ctx).root()

    def subagent_files(session_id: str) -> list[Path]:
        try:
            return root.session_files(session_id)[0]
        except (FileNotFoundError, ValueError):
            return []

    try:
        sent = export_otlp(files, endpoint=endpoint, headers=pairs, subagent_files=subagent_files)
    except OtelError as exc:
        raise CliError(str(exc), code=1) from None
    _console(stderr=True).print(
        Text(f"sent {sent} span(s) to {safe(endpoint, keep_newlines=False)}", style="dim"),
        soft_wrap=True,
    )
