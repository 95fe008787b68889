"""``penguin validate``: check trace files against V-1…V-20 (R-CLI-5).

Owns: the command, expanding its arguments to files, the progress bar of large inputs.
Does not: check anything itself (``replay.validate_session``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final

import typer

from penguin.cli.errors import CliError, errors_to_exit_codes
from penguin.cli.globalopts import Globals, globals_of
from penguin.cli.targets import resolve_target
from penguin.cli.terminal.console import err_console, out_console, write_json
from penguin.cli.terminal.safe import safe
from penguin.cli.tracefiles import find_trace_files, group_sessions, sniff_trace, total_bytes

if TYPE_CHECKING:
    from replay import Finding

__all__ = ["PROGRESS_FILES", "progress", "validate"]

# Inputs at least this large get a progress bar on stderr.
PROGRESS_FILES: Final = 50
_PROGRESS_BYTES: Final = 32 * 2**20


@contextmanager
def progress(total: int, description: str, *, enabled: bool) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr (never on stdout, so ``--json`` stays clean), and only when
    stderr is a terminal: in a pipe or a log it is noise (issue 30 item 2)."""
    if not enabled or total <= 0 or not sys.stderr.isatty():
        yield lambda _n: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err_console(), transient=False) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


def _expand(arg: str, g: Globals) -> list[Path]:
    path = Path(arg)
    if path.is_dir():
        files = find_trace_files(path)
        if not files:
            raise CliError(f"{safe(arg)}: no trace files (*.jsonl) in this directory")
        return files
    if path.exists():
        sniff_trace(path)
        return [path]
    return resolve_target(arg, g).files


def validate(
    ctx: typer.Context,
    paths: Annotated[
        list[str],
        typer.Argument(
            help="Session ids, trace files or directories (searched recursively).",
            show_default=False,
            metavar="SESSION_OR_PATH",
        ),
    ],
    strict: Annotated[
        bool,
        typer.Option(
            "--strict", help="Fail on warnings too, and report decreasing timestamps (V-20)."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print findings as a JSON list.")] = False,
) -> None:
    """Check trace files against the rules V-1…V-20 (SPEC §16.1).

    Prints each finding as `<path>:<line>: <V-id> <error|warning>: <message>`; exit 1 on any
    error (with --strict, on any warning too).  Files are grouped into sessions by the id in
    their names, so cross-file rules (rotation heads, contiguous indices) are checked too.
    """
    from rich.text import Text

    from replay import validate_session

    with errors_to_exit_codes():
        g = globals_of(ctx)
        files: list[Path] = []
        seen: set[Path] = set()
        for arg in paths:
            for f in _expand(arg, g):
                resolved = f.resolve()
                if resolved not in seen:
                    seen.add(resolved)
                    files.append(f)
        groups = group_sessions(files)
        large = len(files) >= PROGRESS_FILES or total_bytes(files) >= _PROGRESS_BYTES
        findings: list[Finding] = []
        with progress(len(files), "validate", enabled=large) as advance:
            for group in groups.values():
                findings.extend(validate_session(group, strict=strict))
                advance(len(group))
        errors = sum(1 for f in findings if f.severity == "error")
        warnings = len(findings) - errors
        if as_json:
            write_json(
                [
                    {
                        "path": str(f.path),
                        "line": f.line,
                        "rule": f.rule,
                        "severity": f.severity,
                        "message": f.message,
                    }
                    for f in findings
                ]
            )
        else:
            console = out_console()
            for finding in findings:
                console.print(Text(safe(str(finding), keep_newlines=False)), soft_wrap=True)
            err_console().print(
                Text(
                    f"{len(files)} file(s), {len(groups)} session(s): {errors} error(s), "
                    f"{warnings} warning(s)",
                    style="dim",
                )
            )
        bad = errors > 0 or (strict and warnings > 0)
        raise typer.Exit(1 if bad else 0)
