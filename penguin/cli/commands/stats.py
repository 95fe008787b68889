"""``penguin stats``: token usage, requests, retries and errors of sessions (R-CLI-7).

Owns: the command.  Does not: fold or render usage (``views.stats``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from penguin.cli.errors import CliError, errors_to_exit_codes
from penguin.cli.globalopts import globals_of
from penguin.cli.options import JsonOpt
from penguin.cli.targets import latest_session_id, resolve_target
from penguin.cli.terminal.console import out_console, write_json

from .validate import PROGRESS_FILES, progress

if TYPE_CHECKING:
    pass

__all__ = ["stats"]


def stats(
    ctx: typer.Context,
    target: Annotated[
        str | None,
        typer.Argument(
            help="A session id or trace path [default: the latest session].",
            show_default=False,
            metavar="SESSION_OR_PATH",
        ),
    ] = None,
    all_sessions: Annotated[
        bool,
        typer.Option(
            "--all", help="Every session of the data root (or of --project / --agent), with totals."
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Token usage, requests, retries, compactions and errors of sessions.

    From the Usage projection: one row per request span (turn or compaction) with its status,
    attempt and token counts, plus error rows (failed requests, failed compactions, aborts).
    """
    from penguin.cli.views.stats import (
        add_summaries,
        finish_totals,
        render_all,
        render_usage,
        usage_json,
        usage_of,
        usage_summary,
    )

    with errors_to_exit_codes():
        g = globals_of(ctx)
        if all_sessions and target is not None:
            raise CliError("give a session or --all, not both")
        if not all_sessions:
            t = resolve_target(target if target is not None else latest_session_id(g), g)
            usage = usage_of(t.files)
            sid = t.session_id or t.label
            if as_json:
                write_json({"session_id": sid, **usage_json(usage)})
            else:
                render_usage(out_console(), sid, usage)
            return
        root = g.existing_root()
        infos = root.sessions(project=g.project, agent=g.agent)
        rows: list[dict[str, Any]] = []
        total: dict[str, Any] = {}
        with progress(len(infos), "stats", enabled=len(infos) >= PROGRESS_FILES) as advance:
            for info in infos:
                row: dict[str, Any] = {
                    "session_id": info.session_id,
                    "project": info.project,
                    "agent": info.agent,
                }
                try:
                    summary = usage_summary(usage_of(info.files))
                except OSError as exc:
                    row["error"] = str(exc)
                else:
                    row.update(summary)
                    add_summaries(total, summary)
                rows.append(row)
                advance(1)
        total = finish_totals(total)
        if as_json:
            write_json({"sessions": rows, "totals": total})
        else:
            render_all(out_console(), rows, total)
