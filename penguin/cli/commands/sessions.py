"""``penguin sessions``: the sessions of the data root, most recently active first (R-CLI-3).

Owns: the command, its readable 80-column listing (short id, relative time, turns, status,
first prompt; subagent children nested under their parent) and its JSON rows; archived sessions
left out unless ``--archived``; ``--archive``/``--unarchive SESSION`` writing the mark (the Web
App's Archive, not ``penguin archive``, which moves trace files to object storage).  Does not:
read traces itself (``listing``) or write records itself (``eventstore.mark_archived``).
"""

from __future__ import annotations

import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from penguin.cli.errors import CliError, errors_to_exit_codes
from penguin.cli.globalopts import globals_of
from penguin.cli.options import JsonOpt
from penguin.cli.terminal.console import err_console, out_console, write_json
from penguin.cli.terminal.safe import preview, safe

if TYPE_CHECKING:
    from rich.console import Console

    from penguin.cli.listing import SessionRow

__all__ = ["relative_time", "sessions"]

_WIDTH: Final = 80
DEFAULT_SHOWN: Final = 20
_STATUS_STYLE: Final = {
    "completed": "green",
    "goal_complete": "green",
    "running": "cyan",
    "awaiting_approval": "cyan",
    "compacting": "cyan",
    "interrupted": "yellow",
    "aborted": "yellow",
    "max_turns": "yellow",
    "goal_blocked": "yellow",
    "budget_limited": "yellow",
    "failed": "red",
    "unreadable": "red",
}


def relative_time(then: float, now: float) -> str:
    """``just now``, ``42 s ago``, ``3 min ago``, ``5 h ago``, ``2 days ago``, else the date."""
    age = max(0.0, now - then)
    if age < 10:
        return "just now"
    if age < 60:
        return f"{int(age)} s ago"
    if age < 3600:
        return f"{int(age // 60)} min ago"
    if age < 86400:
        return f"{int(age // 3600)} h ago"
    if age < 7 * 86400:
        days = int(age // 86400)
        return f"{days} day{'s' if days > 1 else ''} ago"
    return datetime.fromtimestamp(then).strftime("%Y-%m-%d")


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts).isoformat(timespec="seconds")


def _status(row: SessionRow) -> str:
    """The status as a person reads it: a last request that failed is named for what happened
    (``server error 500``, ``connection refused``; issue 30), not by the ``timeout`` recorded."""
    if row.last_error and row.status == row.last_request_status and row.status != "completed":
        from penguin.cli.views.labels import request_label

        return request_label(row.status, row.last_error)
    return row.status


def _json_row(row: SessionRow) -> dict[str, Any]:
    info = row.info
    return {
        "session_id": info.session_id,
        "short_id": info.session_id[-8:],
        "project": info.project,
        "agent": info.agent,
        "created": info.created.isoformat(timespec="seconds"),
        "active": _iso(row.active),
        "files": len(info.files),
        "records": row.records,
        "turns": row.turns,
        "status": row.status,
        "last_status": row.last_request_status,
        "task_running": row.task_running,
        "title": row.first_prompt,
        "workspace": row.workspace,
        "parent": row.parent,
        "children": row.children,
        "latest_trace": str(row.latest),
        "error": row.error,
        "archived": row.archived,
    }


def _nest(rows: list[SessionRow], limit: int | None) -> list[tuple[int, SessionRow]]:
    """Top-level sessions (at most ``limit``) in order, each followed by its children."""
    by_id = {r.session_id: r for r in rows}
    for r in rows:
        for child in r.children:
            if child in by_id:
                by_id[child].parent = r.session_id
    out: list[tuple[int, SessionRow]] = []

    def add(row: SessionRow, depth: int) -> None:
        out.append((depth, row))
        for child in row.children:
            if child in by_id and depth < 8:
                add(by_id[child], depth + 1)

    tops = [r for r in rows if r.parent is None]
    for row in tops[:limit] if limit is not None else tops:
        add(row, 0)
    return out


def _render(console: Console, nested: list[tuple[int, SessionRow]]) -> None:
    from rich.text import Text

    from penguin.cli.views.render import short_id

    width = console.width if console.is_terminal else _WIDTH
    now = time.time()
    id_width = max(10, *(2 * d + (2 if d else 0) + 9 for d, _row in nested))
    rows: list[tuple[str, str, str]] = []  # (head, status, title): every part already safe
    for depth, row in nested:
        lead = "  " * (depth - 1) + "└ " if depth else ""
        ident = f"{lead}{short_id(row.session_id)}"
        title = row.first_prompt or ("(no prompt yet)" if row.error is None else row.error)
        if row.is_child and row.parent is None:
            title = f"(subagent) {title}"
        head = f"{ident:<{id_width}}{relative_time(row.active, now):<14}{row.turns:>5}  "
        room = max(10, width - len(head) - 12 - 1)
        rows.append((head, f"{_status(row):<12} ", preview(title, room)))
    header = f"{'id':<{id_width}}{'active':<14}{'turns':>5}  {'status':<12} title"
    if not console.is_terminal or console.no_color:
        # Plain text needs no rich rendering, whose cost per row dominates long listings.
        console.file.write("\n".join([header, *("".join(r) for r in rows)]) + "\n")
        return
    text = Text(header, style="bold")
    for head, status, title in rows:
        text.append("\n" + head)
        text.append(status, style=_STATUS_STYLE.get(status.strip(), ""))
        text.append(title)
    console.print(text, soft_wrap=True)


def sessions(
    ctx: typer.Context,
    limit: Annotated[
        int | None,
        typer.Option(
            "-n",
            "--limit",
            help="Show the N most recently active sessions [default: 20; --json: all].",
            show_default=False,
        ),
    ] = None,
    cwd: Annotated[
        bool,
        typer.Option("--cwd", help="Only sessions whose workspace is the current directory."),
    ] = False,
    archived: Annotated[
        bool,
        typer.Option("--archived", help="List the archived sessions instead of the others."),
    ] = False,
    archive: Annotated[
        str | None,
        typer.Option(
            "--archive",
            metavar="SESSION",
            help="Archive SESSION: hide it from this list (a record in its trace; nothing moves).",
        ),
    ] = None,
    unarchive: Annotated[
        str | None,
        typer.Option("--unarchive", metavar="SESSION", help="Show an archived SESSION again."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List sessions, most recently active first, subagent children under their parent.

    Columns: short id (any unique prefix or short id works wherever a session id is taken),
    last activity, turns, status (completed, interrupted by a crash, running, aborted, …) and
    the first prompt.  What the reader skipped is printed on stderr.  Takes no lock and changes
    no trace; the session index (<home>/index.sqlite3) keeps what it read for the next listing.

    Archived sessions (the Web App's Archive, or --archive) are left out; --archived lists
    them.  --archive/--unarchive write a session_archived record to the session's trace while
    holding its lock.  This is not `penguin archive`, which moves trace files to object storage.
    """
    from penguin.cli.diagnose import report
    from penguin.cli.listing import list_sessions, recent_sessions

    with errors_to_exit_codes():
        if limit is not None and limit <= 0:
            raise CliError(f"--limit must be at least 1, not {limit}")
        g = globals_of(ctx)
        if archive is not None or unarchive is not None:
            if archive is not None and unarchive is not None:
                raise CliError("give --archive or --unarchive, not both")
            target = archive if archive is not None else unarchive
            assert target is not None
            _mark(g, target, archived=archive is not None)
            return
        root = g.existing_root()
        # The latest DEFAULT_SHOWN on a screen (5,000 rows help nobody); --json lists all.
        shown = limit if limit is not None else None if as_json else DEFAULT_SHOWN
        if shown is not None and not cwd:
            # Only the rows shown are read from the index.
            rows, tops = recent_sessions(
                root, project=g.project, agent=g.agent, limit=shown, archived=archived
            )
        else:
            rows = list_sessions(root, project=g.project, agent=g.agent)
            rows = [r for r in rows if r.archived == archived]
            if cwd:
                here = str(Path.cwd().resolve())
                rows = [r for r in rows if r.workspace is not None and _same(r.workspace, here)]
            tops = sum(1 for r in rows if r.parent is None)
        nested = _nest(rows, shown)
        hidden = tops - sum(1 for d, _r in nested if d == 0)
        for _depth, row in nested:
            if row.diagnostics:
                report(err_console(), row.diagnostics)
        if as_json:
            write_json([_json_row(r) for _d, r in nested])
            return
        if not nested:
            # Plain: the first thing a new user runs needs no terminal toolkit (start-up).
            where = " for this directory" if cwd else ""
            which = "archived sessions" if archived else "sessions"
            sys.stdout.write(f"no {which}{where} under {safe(str(root.home))}\n")
            return
        _render(out_console(), nested)
        if hidden > 0:
            sys.stdout.write(f"{hidden} more (use -n)\n")


def _mark(g: Any, arg: str, *, archived: bool) -> None:
    """Write SESSION's archive mark; a session a writer holds is refused (exit 1)."""
    from eventstore import SessionLocked, mark_archived
    from penguin.cli.targets import resolve_session_id

    sid = resolve_session_id(g, arg)
    try:
        mark_archived(g.existing_root(), sid, archived=archived, project=g.project, agent=g.agent)
    except FileNotFoundError:
        raise CliError(f"no session {safe(arg, keep_newlines=False)}") from None
    except SessionLocked as exc:
        raise CliError(f"{safe(sid)} is open in another process: {exc}", code=1) from None
    if archived:
        sys.stdout.write(f"archived {sid}: `penguin sessions --archived` lists it\n")
    else:
        sys.stdout.write(f"unarchived {sid}\n")


def _same(workspace: str, here: str) -> bool:
    try:
        return str(Path(workspace).resolve()) == here
    except (OSError, RuntimeError):
        return workspace == here
