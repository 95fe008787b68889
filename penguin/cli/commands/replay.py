"""``penguin replay``: re-run a recorded session and compare (R-CLI-6).

Owns: the command and its output.  Does not: replay (``replay.golden.replay_trace``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from penguin.cli.errors import CliError, errors_to_exit_codes
from penguin.cli.globalopts import globals_of
from penguin.cli.options import JsonOpt, ModeChoice
from penguin.cli.targets import resolve_target
from penguin.cli.terminal.console import err_console, out_console, write_json
from penguin.cli.terminal.safe import safe
from penguin.cli.tracefiles import find_trace_files

if TYPE_CHECKING:
    pass

if TYPE_CHECKING:
    from replay.golden import Divergence, ReplayResult

__all__ = ["replay"]


def replay(
    ctx: typer.Context,
    target: Annotated[
        str,
        typer.Argument(
            help="A session id, a trace file, or a directory holding one session's files "
            "(and its subagents').",
            show_default=False,
            metavar="SESSION_OR_PATH",
        ),
    ],
    max_turns: Annotated[
        int | None,
        typer.Option(
            "--max-turns",
            help="Turn limit of the replayed runs [default: from "
            "the trace's max-turns notice, else 100].",
            show_default=False,
        ),
    ] = None,
    max_context_length: Annotated[
        int | None,
        typer.Option(
            "--max-context-length",
            help="Compaction threshold [default: inferred from the recorded compactions].",
            show_default=False,
        ),
    ] = None,
    max_session_turns: Annotated[
        int | None,
        typer.Option(
            "--max-session-turns",
            help="Turns-in-context compaction threshold [default: inferred].",
            show_default=False,
        ),
    ] = None,
    compaction_mode: Annotated[
        ModeChoice | None,
        typer.Option(
            "--compaction-mode", help="Compaction mode [default: as recorded].", show_default=False
        ),
    ] = None,
    allow_partial: Annotated[
        bool,
        typer.Option(
            "--allow-partial",
            help="Exit 0 when what could be compared matched, although not every run could "
            "be (R-GOLD-5).",
        ),
    ] = False,
    live_tools: Annotated[
        Path | None,
        typer.Option(
            "--live-tools",
            help="Run the tools for real in a scratch copy of this workspace; the model is "
            "still answered from the recording (R-GOLD-7).",
            metavar="WORKSPACE",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-run a recorded session and compare the result with its trace.

    The session is replayed in a temporary data root with the recorded model answers, tool
    outputs and approvals; both record sequences (timestamps and session_meta left out) must
    be equal.  Every run is compared: steering is injected, user aborts are fired and crashes
    are stopped and resumed where the trace shows them.  Prints `match`, or the first
    divergence; exit 1 on a divergence, and when fewer runs than the session holds could be
    compared ("N of M runs compared: <why>") unless --allow-partial.  Settings are read from
    the trace; the options override them.  With --live-tools the tools run for real in a
    scratch copy of WORKSPACE and a tool output that differs is the divergence.
    """
    with errors_to_exit_codes():
        from replay.golden import replay_trace  # heavy: only this command needs it

        source: Path | list[Path]
        try:
            t = resolve_target(target, globals_of(ctx))
            source = t.files if len(t.files) > 1 else t.files[0]
        except CliError:
            # A session's directory may hold its subagents' sessions too: replay picks the
            # parent (R-SUB-3) and refuses, naming them, when there is no single one.
            if not Path(target).is_dir() or not find_trace_files(Path(target)):
                raise
            source = Path(target)
        result = replay_trace(
            source,
            max_turns=max_turns,
            max_context_length=max_context_length,
            max_session_turns=max_session_turns,
            compaction_mode=compaction_mode.value if compaction_mode else None,
            live_tools=live_tools,
        )
        _print(result, as_json=as_json, allow_partial=allow_partial)
        raise typer.Exit(0 if result.passed(allow_partial=allow_partial) else 1)


def _print(result: ReplayResult, *, as_json: bool, allow_partial: bool) -> None:
    from rich.text import Text

    runs, of = result.runs_compared, result.runs_total
    d = result.divergence
    if as_json:
        write_json(
            {
                "matched": result.matched,
                "passed": result.passed(allow_partial=allow_partial),
                "runs_compared": runs,
                "runs_total": of,
                "stopped": result.stopped,
                "divergence": _divergence_json(d),
                "summary": str(result),
            }
        )
        return
    out = out_console()
    if result.matched and result.complete:
        out.print(Text(f"match ({runs} of {of} run(s) compared)", style="green"))
    elif result.matched:
        style = "yellow" if allow_partial else "red"
        out.print(Text(safe(result.partial_reason or ""), style=style), soft_wrap=True)
    else:
        where = f" at record {d.index}" if d is not None else ""
        out.print(Text(f"diverged{where} ({runs} of {of} run(s) compared):", style="red"))
        out.print(Text(safe(str(result))), soft_wrap=True)
    if result.stopped:
        err_console().print(
            Text(f"compared up to: {safe(result.stopped)}", style="dim"), soft_wrap=True
        )


def _divergence_json(d: Divergence | None) -> dict[str, Any] | None:
    if d is None:
        return None
    return {
        "file": str(d.file) if d.file is not None else None,
        "line": d.line,
        "index": d.index,
        "expected": d.expected,
        "actual": d.actual,
        "reason": d.reason,
    }
