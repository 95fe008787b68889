"""``penguin rewind`` and ``penguin gc``: undo an agent's work (SPEC §27, R-SNAP-2/3).

Owns: their arguments, the plan shown before anything is written, the confirmation, output and
exit codes.  Does not: plan, restore or collect (``replay.plan_rewind``, ``rewind_session``,
``collect_snapshots``).  Registered in ``_app.COMMANDS``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from penguin.cli.errors import CliError, errors_to_exit_codes
from penguin.cli.globalopts import globals_of as _globals
from penguin.cli.options import JsonOpt
from penguin.cli.targets import resolve_session_id
from penguin.cli.terminal.console import console as _console
from penguin.cli.terminal.console import write_json
from penguin.cli.terminal.safe import safe

if TYPE_CHECKING:
    from replay import RewindPlan

__all__: list[str] = []


def parse_point(text: str) -> tuple[int, int] | int:
    """``FILE:ORDINAL`` or a task number."""
    from replay import parse_position

    if ":" in text:
        try:
            return parse_position(text)
        except ValueError as exc:
            raise CliError(str(exc)) from None
    try:
        return int(text)
    except ValueError:
        raise CliError(
            f"invalid rewind point {text!r}: a task number (1, 2, …) or FILE:ORDINAL"
        ) from None


def plan_lines(plan: RewindPlan) -> list[str]:
    """The plan as a person reads it: what will be created, changed and deleted."""
    lines = [
        f"rewind to the end of task {plan.task} (record {plan.at[0]}:{plan.at[1]}) in "
        f"{safe(str(plan.workspace), keep_newlines=False)}"
    ]
    if plan.snapshot is None:
        lines.append("  no snapshot before this point: the workspace is left as it is")
    for verb, names in (("create", plan.create), ("change", plan.change), ("delete", plan.delete)):
        for name in names:
            lines.append(f"  {verb:<7}{safe(name, keep_newlines=False)}")
    if plan.snapshot is not None and plan.empty:
        lines.append("  the workspace already matches this point")
    for name in plan.outside:
        lines.append(f"  ! changed outside the session: {safe(name, keep_newlines=False)}")
    return lines


def _plan_json(plan: RewindPlan) -> dict[str, Any]:
    return {
        "session_id": plan.session_id,
        "task": plan.task,
        "at": f"{plan.at[0]}:{plan.at[1]}",
        "workspace": str(plan.workspace),
        "snapshot": plan.snapshot,
        "create": plan.create,
        "change": plan.change,
        "delete": plan.delete,
        "outside": plan.outside,
    }


def _confirm(question: str) -> bool:
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return False
    typer.echo(question, nl=False, err=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def rewind(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(help="Session id, unique prefix or short id.")],
    to: Annotated[
        str,
        typer.Option(
            "--to",
            help="A task number (1 = the end of the first task) or FILE:ORDINAL of a task's "
            "final reply (as `penguin inspect --records` shows).",
            metavar="TASK|FILE:ORDINAL",
        ),
    ],
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite files changed outside the session.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before writing.")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would change; write nothing.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Put the workspace back as it was at the end of a task and fork the conversation there.

    Shows the files it will create, change and delete first. Refuses when a file changed
    outside the session since its last snapshot, unless --force. The original session stays
    as it was (it can be rewound again); the fork is a new session to resume.
    """
    from replay import RewindRefused, plan_rewind, rewind_session

    with errors_to_exit_codes():
        g = _globals(ctx)
        sid = resolve_session_id(g, session)
        point = parse_point(to)
        plan = plan_rewind(g.root(), sid, to=point)
        out = _console()
        if not as_json:
            for line in plan_lines(plan):
                out.print(line, soft_wrap=True, markup=False, highlight=False)
        if dry_run:
            if as_json:
                write_json({**_plan_json(plan), "dry_run": True})
            raise typer.Exit(0)
        if plan.outside and not force:
            raise CliError(
                f"{len(plan.outside)} file(s) changed outside the session since its last "
                "snapshot; nothing written (use --force to overwrite them)"
            )
        if not yes and not as_json and not _confirm("Rewind? [y/N] "):
            raise CliError("not confirmed; nothing written (use --yes to skip the question)")
        try:
            result = rewind_session(g.root(), sid, to=point, force=force)
        except RewindRefused as exc:
            raise CliError(str(exc)) from None
        if as_json:
            write_json({**_plan_json(result.plan), "new_session_id": result.new_session_id})
        else:
            out.print(
                f"workspace restored; the conversation continues in {result.new_session_id} "
                f"(penguin resume {result.new_session_id})",
                soft_wrap=True,
                markup=False,
                highlight=False,
            )


def gc(
    ctx: typer.Context,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would be removed; remove nothing.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Remove workspace snapshots that no kept session refers to.

    Snapshots are shared by the sessions of an agent; a blob stays while any session's trace
    names a snapshot that holds it. Run it after deleting sessions.
    """
    from replay import collect_snapshots

    with errors_to_exit_codes():
        done = collect_snapshots(_globals(ctx).root(), dry_run=dry_run)
        if as_json:
            write_json({**done, "dry_run": dry_run})
            return
        verb = "would remove" if dry_run else "removed"
        out = _console()
        out.print(
            f"{verb} {done['trees']} snapshot tree(s) and {done['blobs']} blob(s), "
            f"{done['bytes']:,} bytes",
            markup=False,
            highlight=False,
        )
        if done["skipped_agents"]:
            out.print(
                f"left alone: {done['skipped_agents']} agent(s) with a session open in another "
                "process (run gc again when it has ended)",
                markup=False,
                highlight=False,
            )
