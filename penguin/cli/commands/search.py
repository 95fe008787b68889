"""``penguin search TEXT``: the sessions whose texts, tool calls or outputs match, newest first.

Owns: the command — catching the session index up, its FTS5 query, the readable listing (short
id, last activity, status, title; then the best hit's ``FILE:ORDINAL``, what matched and a
snippet with the matching words highlighted, every part escaped: trace text is untrusted) and
its JSON rows.  Does not: search itself (``penguin._index``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from penguin.cli.errors import CliError, errors_to_exit_codes
from penguin.cli.globalopts import globals_of
from penguin.cli.options import JsonOpt
from penguin.cli.terminal.console import out_console, write_json
from penguin.cli.terminal.safe import preview, safe

if TYPE_CHECKING:
    from rich.console import Console

    from penguin._index import Hit

__all__ = ["search"]

_WIDTH: Final = 80
_HELP_QUERY: Final = (
    'words match in any order (all of them); "a phrase" in that order; pars* any word '
    "starting with pars; a OR b; a NOT b; (a OR b) AND c; NEAR(a b, 5)"
)


def _json_row(hit: Hit) -> dict[str, Any]:
    from datetime import datetime

    row = hit.as_dict()
    row["short_id"] = hit.session_id[-8:]
    row["active"] = datetime.fromtimestamp(hit.active).isoformat(timespec="seconds")
    row["inspect"] = f"penguin inspect {hit.session_id} --at {hit.at}"
    return row


def _snippet_text(hit: Hit, room: int) -> list[tuple[str, bool]]:
    """The snippet as (safe text, match) parts on one line of about ``room`` characters, the
    first match kept in view (the plain text before it is cut from the left)."""
    parts = [
        (safe(s.text.replace("\r\n", "\n").replace("\n", "⏎"), keep_newlines=False), s.match)
        for s in hit.snippet
    ]
    if parts and not parts[0][1] and len(parts[0][0]) > room // 3:
        parts[0] = ("…" + parts[0][0][-(room // 3) :], False)
    out: list[tuple[str, bool]] = []
    used = 0
    for text, match in parts:
        if used + len(text) > room:
            text = text[: max(0, room - used - 1)] + "…"
        out.append((text, match))
        used += len(text)
        if used >= room:
            break
    return out


def _render(console: Console, hits: list[Hit]) -> None:
    from rich.text import Text

    from penguin.cli.views.render import short_id

    from .sessions import relative_time

    width = console.width if console.is_terminal else _WIDTH
    plain = not console.is_terminal or console.no_color
    now = time.time()
    text = Text()
    lines: list[str] = []
    for hit in hits:
        head = f"{short_id(hit.session_id)}  {relative_time(hit.active, now):<14}{hit.status:<12} "
        if hit.archived:  # hidden from `penguin sessions`, so say why it is not listed there
            head += "[archived] "
        title = preview(hit.title or "(no prompt)", max(10, width - len(head)))
        where = f"  {hit.at:<8} {safe(hit.kind)}: "
        parts = _snippet_text(hit, max(20, width - len(where)))
        if plain:
            lines += [head + title, where + "".join(t for t, _m in parts)]
            continue
        text.append(head, style="bold")
        text.append(title + "\n")
        text.append(where, style="dim")
        for t, match in parts:
            text.append(t, style="bold yellow" if match else "")
        text.append("\n")
    footer = "open a hit: penguin inspect SESSION --at FILE:ORDINAL"
    if plain:
        console.file.write("\n".join([*lines, footer]) + "\n")
        return
    text.append(footer, style="dim")
    console.print(text, soft_wrap=True)


def search(
    ctx: typer.Context,
    text: Annotated[
        str,
        typer.Argument(
            help=f"What to find (SQLite FTS5 query syntax: {_HELP_QUERY}).", show_default=False
        ),
    ],
    limit: Annotated[
        int,
        typer.Option("-n", "--limit", help="Show at most N sessions.", min=1),
    ] = 20,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="Only sessions active since a time: 30m, 12h, 7d, 2w or a date (2026-11-30).",
            show_default=False,
        ),
    ] = None,
    cwd: Annotated[
        bool,
        typer.Option("--cwd", help="Only sessions whose workspace is the current directory."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Find sessions by what was said and done in them: user and assistant texts, tool names,
    arguments and outputs (the first 4 KiB of each output).

    Matching sessions are listed most recently active first, each with its best hit: the
    position FILE:ORDINAL (open it with `penguin inspect SESSION --at FILE:ORDINAL`), what
    matched there and a snippet.  Matching ignores case and accents.  Takes no lock and changes
    no trace (the session index, <home>/index.sqlite3, catches up first).
    """
    from penguin._index import Index, QuerySyntaxError, parse_since

    with errors_to_exit_codes():
        g = globals_of(ctx)
        root = g.existing_root()
        try:
            after = None if since is None else parse_since(since, now=time.time())
        except ValueError as exc:
            raise CliError(f"--since: {exc}") from None
        workspace = str(Path.cwd().resolve()) if cwd else None
        with Index(root) as index:
            index.refresh(project=g.project, agent=g.agent)
            try:
                hits = index.search(
                    text,
                    limit=limit,
                    since=after,
                    workspace=workspace,
                    project=g.project,
                    agent=g.agent,
                )
            except QuerySyntaxError as exc:
                raise CliError(
                    f"{safe(str(exc), keep_newlines=False)}\n"
                    f"query syntax: {_HELP_QUERY}; put any other punctuation in double quotes"
                ) from None
        if as_json:
            write_json([_json_row(h) for h in hits])
            return
        if not hits:
            sys.stdout.write(f"no session matches {safe(text, keep_newlines=False)!s}\n")
            return
        _render(out_console(), hits)
