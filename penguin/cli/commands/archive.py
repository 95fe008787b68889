"""``penguin archive``: move idle sessions' closed trace files to object storage, and
(``--from``) make the sessions archived in a bucket readable in this data root.

Owns: its arguments, choosing the sessions (ids given, or ``--idle DAYS``), the per-file
and per-session output and the exit code.  Does not: upload, verify, record, restore or fetch
back (``eventstore.archive``).  Registered in ``_app.COMMANDS``.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from penguin.cli.errors import CliError, errors_to_exit_codes
from penguin.cli.globalopts import globals_of as _globals
from penguin.cli.options import JsonOpt
from penguin.cli.terminal.console import console as _console
from penguin.cli.terminal.console import write_json
from penguin.cli.terminal.safe import safe

__all__: list[str] = []


def archive(
    ctx: typer.Context,
    sessions: Annotated[
        list[str] | None,
        typer.Argument(help="Session ids to archive (whole sessions; none held by a writer)."),
    ] = None,
    to: Annotated[
        str,
        typer.Option(
            "--to",
            help="Where the files go: s3://BUCKET/PREFIX (or any fsspec URL).",
            metavar="URL",
        ),
    ] = "",
    from_: Annotated[
        str,
        typer.Option(
            "--from",
            help="Instead: find the sessions archived at URL (by any machine) and make them "
            "readable here: their records are written into this data root, their files are "
            "fetched when first read. Session ids given: only those.",
            metavar="URL",
        ),
    ] = "",
    idle: Annotated[
        float | None,
        typer.Option(
            "--idle",
            help="Archive every session none of whose files changed in DAYS days.",
            metavar="DAYS",
            min=0,
        ),
    ] = None,
    endpoint_url: Annotated[
        str | None,
        typer.Option(
            "--endpoint-url",
            help="An S3-compatible server's address (MinIO, Ceph, R2 …); kept in the record.",
            metavar="URL",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Upload closed trace files to object storage, verify each by its SHA-256, then remove
    the local copy. Every reader fetches an archived file back when it needs it. Each session's
    archive record goes to the bucket too, so another machine finds it: `--from URL`.

    Credentials come from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_PROFILE
    …) and are never written anywhere. A file whose upload fails or whose hash differs stays on
    disk (exit 1).
    """
    from eventstore import SessionLocked, validate_id
    from eventstore.archive import archive_session, idle_sessions

    with errors_to_exit_codes(as_json=as_json):
        if from_:
            if to or idle is not None:
                raise CliError("--from reads an archive: give it without --to and --idle")
            _restore(ctx, from_, sessions, endpoint_url, as_json=as_json)
            return
        if not to:
            raise CliError("--to URL is required (e.g. --to s3://bucket/penguin)")
        if bool(sessions) == (idle is not None):
            raise CliError("give session ids or --idle DAYS (one of the two)")
        g = _globals(ctx)
        root = g.existing_root()
        chosen: list[tuple[str, str | None, str | None]]
        if idle is not None:
            chosen = list(idle_sessions(root, days=idle, project=g.project, agent=g.agent))
        else:
            chosen = [
                (validate_id(s, what="session id"), g.project, g.agent) for s in sessions or []
            ]
        report: list[dict[str, Any]] = []
        failed = False
        out = _console()
        for session_id, project, agent in chosen:
            try:
                outcomes = archive_session(
                    root, session_id, to=to, project=project, agent=agent, endpoint_url=endpoint_url
                )
            except SessionLocked as exc:
                failed = True
                report.append({"session_id": session_id, "error": str(exc), "files": []})
                if not as_json:
                    out.print(f"{session_id}: in use, left alone ({safe(str(exc))})", markup=False)
                continue
            failed |= any(o.status == "kept" for o in outcomes)
            files = [
                {"path": str(o.path), "url": o.url, "status": o.status, "size": o.size}
                | ({"error": o.error} if o.error else {})
                for o in outcomes
            ]
            report.append({"session_id": session_id, "files": files})
            if as_json:
                continue
            if not outcomes:
                out.print(f"{session_id}: nothing on local disk to archive", markup=False)
            for o in outcomes:
                line = f"{o.status:<9}{safe(o.path.name)} -> {safe(o.url)}"
                if o.error:
                    line += f"  ({safe(o.error)}: the local file stays)"
                out.print(line, markup=False, highlight=False)
        if as_json:
            write_json({"to": to, "sessions": report})
        elif not chosen:
            out.print("no session to archive", markup=False)
        if failed:
            raise typer.Exit(1)


def _restore(
    ctx: typer.Context,
    url: str,
    sessions: list[str] | None,
    endpoint_url: str | None,
    *,
    as_json: bool,
) -> None:
    from eventstore import validate_id
    from eventstore.archive import restore_records

    root = _globals(ctx).writable_root()
    wanted = [validate_id(s, what="session id") for s in sessions or []] or None
    outcomes = restore_records(root, url, sessions=wanted, endpoint_url=endpoint_url)
    if as_json:
        write_json(
            {
                "from": url,
                "sessions": [
                    {
                        "session_id": o.session_id,
                        "project": o.project,
                        "agent": o.agent,
                        "date": o.date,
                        "status": o.status,
                        "files": o.files,
                    }
                    | ({"error": o.error} if o.error else {})
                    for o in outcomes
                ],
            }
        )
    else:
        out = _console()
        for o in outcomes:
            line = f"{o.status:<9}{safe(o.session_id)}"
            if o.status == "restored":
                line += f"  {o.files} file(s), fetched when first read"
            elif o.status == "present":
                line += "  already in this data root: left as it is"
            else:
                line += f"  ({safe(o.error or '')}: nothing written)"
            out.print(line, markup=False, highlight=False)
        if not outcomes:
            out.print(f"no archived session found at {safe(url)}", markup=False)
    if any(o.status == "refused" for o in outcomes):
        raise typer.Exit(1)
