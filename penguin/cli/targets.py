"""The one resolver of a session argument: an id, a unique prefix or short id, a path, or none.

Owns: ``resolve_target`` (a ``SESSION_ID|PATH`` argument of the reading commands: a session of
the data root, a trace file, or a directory holding one session's files), ``resolve_session_id``
(a session of the data root only, for the commands that continue one; none means the latest),
and matching a prefix or short id against the root.  Does not: list sessions (``listing``) or
read records.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import CliError
from .globalopts import Globals
from .terminal.safe import safe
from .tracefiles import find_trace_files, sniff_trace, trace_name

if TYPE_CHECKING:
    from eventstore import DataRoot, SessionFiles

__all__ = [
    "Target",
    "latest_session_id",
    "match_session_id",
    "resolve_session_id",
    "resolve_target",
]


@dataclass(slots=True)
class Target:
    """What a ``SESSION_ID|PATH`` argument named.

    ``session_id`` is set for a session found in the data root (``files`` are then all its
    files) and for a directory or file whose names carry one session id.
    """

    files: list[Path]
    session_id: str | None = None
    project: str | None = None
    agent: str | None = None
    label: str = ""


def _exists(root: DataRoot, session_id: str, g: Globals) -> bool:
    try:
        root.trace_files(session_id, project=g.project, agent=g.agent)
    except (FileNotFoundError, LookupError):
        return False
    return True


def _looks_like_id(text: str) -> bool:
    from eventstore import validate_id

    try:
        validate_id(text, what="session id")
    except ValueError:
        return False
    return True


def resolve_target(arg: str, g: Globals) -> Target:
    """A session id in the data root, a trace file, or a directory holding one session's files.

    Exit-2 failures: a missing path, an unknown session, a directory without trace files or
    with several sessions, a file that is not a trace.
    """
    path = Path(arg)
    shown = safe(arg, keep_newlines=False)
    if path.is_dir():
        files = find_trace_files(path)
        if not files:
            raise CliError(f"{shown}: no trace files (*.jsonl) in this directory")
        ids = sorted({(trace_name(p) or (p.stem, 0))[0] for p in files})
        if len(ids) > 1:
            listed = ", ".join(safe(i, keep_newlines=False) for i in ids[:5])
            more = ", …" if len(ids) > 5 else ""
            raise CliError(
                f"{shown}: holds {len(ids)} sessions ({listed}{more}); name one session or file"
            )
        for p in files:
            sniff_trace(p)
        files.sort(key=lambda p: (trace_name(p) or ("", 0))[1])
        return Target(files=files, session_id=ids[0], label=str(path))
    if path.exists():
        sniff_trace(path)
        name = trace_name(path)
        return Target(files=[path], session_id=name[0] if name else None, label=str(path))
    if _looks_like_id(arg):
        root = g.root()
        if not root.home.exists():  # a mistyped --home, not an unknown id (issue 30 item 8)
            raise CliError(
                f"unknown session: {shown}: no data root at "
                f"{safe(str(root.home), keep_newlines=False)} (--home DIR or $PENGUIN_HOME names "
                "the directory holding the sessions)"
            )
        if not _exists(root, arg, g):
            arg = match_session_id(root, arg, g) or arg
        try:
            files = root.trace_files(arg, project=g.project, agent=g.agent)
            location = root.locate(arg, project=g.project, agent=g.agent)
        except FileNotFoundError:
            raise CliError(
                f"unknown session: {shown} (no such session under {safe(str(root.home))}, "
                "and no such file)"
            ) from None
        return Target(
            files=files,
            session_id=arg,
            project=location.project,
            agent=location.agent,
            label=arg,
        )
    raise CliError(f"{shown}: no such file or directory")


def match_session_id(root: DataRoot, arg: str, g: Globals) -> str | None:
    """The one session of the root whose id starts with ``arg``, or whose short id (the last 8
    characters, as listings show it) is ``arg``; None when there is none; ``CliError`` when
    several match.  One walk of the root."""
    # The names only (no file opened): only the candidates are asked whether they are
    # sessions (a session_meta, R-ROOT-10); archived sessions stay where they are.
    by_id: dict[str, list[SessionFiles]] = {}
    for entry in root.listing(project=g.project, agent=g.agent):
        by_id.setdefault(entry.session_id, []).append(entry)

    def sessions(ids: list[str]) -> list[str]:
        return [
            sid
            for sid in ids
            if any(root.session_info(e, fetch=False) is not None for e in by_id[sid])
        ]

    ids = sorted(by_id)
    found = sessions([sid for sid in ids if sid.startswith(arg)]) or sessions(
        [sid for sid in ids if sid[-8:] == arg]
    )
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (", …" if len(found) > 5 else "")
        raise CliError(
            f"session id {safe(arg)} is ambiguous: it matches {len(found)} sessions ({shown})"
        )
    return found[0] if found else None


def latest_session_id(g: Globals) -> str:
    """The most recently active top-level session of the project/agent that is not archived
    (issue 15 item 7)."""
    return resolve_session_id(g, None)


def resolve_session_id(g: Globals, arg: str | None) -> str:
    """``arg`` as given when it names a session; else a unique prefix or short id of one; for
    None, the most recently active top-level session of the project/agent that is not archived
    (issue 15 item 7)."""
    from eventstore import DEFAULT_AGENT, DEFAULT_PROJECT, validate_id

    from .listing import list_sessions  # the listing builds on this module

    root = g.existing_root()
    if arg is None:
        # The session at the top of `penguin sessions`: an archived one is hidden there, so
        # it is not "the latest" either (name it to reach it).
        project, agent = g.project or DEFAULT_PROJECT, g.agent or DEFAULT_AGENT
        rows = list_sessions(
            root, project=project, agent=agent, limit=1, top_level=True, archived=False
        )
        if not rows:
            if list_sessions(
                root, project=project, agent=agent, limit=1, top_level=True, archived=True
            ):
                raise CliError(
                    f"every session of {project}/{agent} is archived: name one "
                    "(penguin sessions --archived lists them)"
                )
            raise CliError(f"no sessions yet for {project}/{agent} under {safe(str(root.home))}")
        return rows[0].session_id
    validate_id(arg, what="session id")
    try:
        root.trace_files(arg, project=g.project, agent=g.agent)
    except FileNotFoundError:
        return match_session_id(root, arg, g) or arg  # unknown: the caller reports it
    return arg
