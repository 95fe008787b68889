"""Finding sessions: the listing behind ``penguin sessions``, "the latest session", and id
prefixes.

Owns: one walk of the data root (``DataRoot.sessions``), then one read of each listed
session's own files — never a search of the tree per session, so listing stays linear in the
number of sessions — the listing's per-session summary (status, turns, first prompt, parent),
ordering by last activity, and resolving a unique id prefix.  Does not: print (``_sessions``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from eventstore import (
    DEFAULT_AGENT,
    DEFAULT_PROJECT,
    DataRoot,
    Diagnostic,
    SessionInfo,
    SessionMetaPayload,
    SubagentPayload,
    TextPayload,
    ToolListReadyPayload,
    file_index,
    scan_trace,
    validate_id,
)
from projections import SessionState

from ._clikit import CliError, Globals, match_session_id
from ._diagnose import wrong_type
from ._safe import safe

__all__ = ["SessionRow", "list_sessions", "resolve_session_id", "summarize"]

_PROMPT_CHARS: Final = 200


@dataclass(slots=True)
class SessionRow:
    """One listed session.  ``status``: completed, failed, aborted, timeout… (the last
    request's), ``interrupted`` (a request or task left open by a crash), ``running`` (open,
    and the lock's holder is alive), ``new`` (no request yet) or ``unreadable``."""

    info: SessionInfo
    active: float
    latest: Path
    status: str = "new"
    records: int = 0
    turns: int = 0
    first_prompt: str | None = None
    workspace: str | None = None
    last_request_status: str | None = None
    task_running: bool = False
    is_child: bool = False
    parent: str | None = None
    children: list[str] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    error: str | None = None

    @property
    def session_id(self) -> str:
        return self.info.session_id


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _holder_alive(lock: Path) -> bool:
    try:
        pid = int(lock.read_text(encoding="ascii", errors="replace").split()[0])
    except (OSError, ValueError, IndexError):
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fold_file(row: SessionRow, state: SessionState, path: Path, *, last: bool) -> None:
    kinds: set[str] = set()
    for item in scan_trace(path):
        if isinstance(item, Diagnostic):
            row.diagnostics.append(item)
            continue
        line, record = item
        why = wrong_type(record)
        if why is not None:
            row.diagnostics.append(Diagnostic(path, line, "malformed", why))
            continue
        p = record.payload
        if isinstance(p, SessionMetaPayload):
            kinds.add("session_meta")
            row.is_child = row.is_child or p.source == "subagent"
            row.workspace = row.workspace or p.workspace
        elif not isinstance(p, ToolListReadyPayload):
            kinds.add("other")
        if record.origin is None:
            if isinstance(p, SubagentPayload):
                row.children.append(p.session_id)
            elif row.first_prompt is None and isinstance(p, TextPayload) and p.role == "user":
                row.first_prompt = p.text[:_PROMPT_CHARS]
        state.apply(record)
    residue = "session_meta" not in kinds or ((file_index(path) or 1) > 1 and "other" not in kinds)
    if last and residue:
        row.diagnostics.append(
            Diagnostic(path, 1, "empty_file", "crash residue (R-ROOT-10): ignored")
        )


def summarize(info: SessionInfo) -> SessionRow:
    """Read the session's own files once (no search of the root)."""
    files = info.files
    row = SessionRow(info=info, active=_mtime(files[-1]), latest=files[-1])
    state = SessionState()
    try:
        for position, path in enumerate(files, start=1):
            _fold_file(row, state, path, last=position == len(files))
    except OSError as exc:
        row.status, row.error = "unreadable", str(exc)
        return row
    row.records, row.turns = state.records, state.turns_total
    row.last_request_status = state.last_request_status
    row.task_running = state.task_running
    if any(d.kind == "empty_file" for d in row.diagnostics) and len(files) > 1:
        row.latest = files[-2]
    if state.open_request or state.open_compaction is not None or state.task_running:
        lock = row.latest.parent / f"{info.session_id}.lock"
        row.status = "running" if _holder_alive(lock) else "interrupted"
    elif state.last_request_status is not None:
        row.status = str(state.last_request_status)
    return row


def list_sessions(
    root: DataRoot,
    *,
    project: str | None = None,
    agent: str | None = None,
    limit: int | None = None,
    top_level: bool = False,
) -> list[SessionRow]:
    """Sessions by last activity (the latest file's modification time), newest first.

    Only the ``limit`` most recently active are read; with ``top_level`` subagent children
    are left out (they are then read to tell, so ``limit`` counts top-level sessions)."""
    infos = root.sessions(project=project, agent=agent)
    by_activity = sorted(
        ((_mtime(i.files[-1]), i) for i in infos), key=lambda t: (t[0], t[1].session_id)
    )
    rows: list[SessionRow] = []
    for _active, info in reversed(by_activity):
        if limit is not None and len(rows) >= limit:
            break
        row = summarize(info)
        if top_level and row.is_child:
            continue
        rows.append(row)
    return rows


def resolve_session_id(g: Globals, arg: str | None) -> str:
    """``arg`` as given when it names a session; else a unique prefix or short id of one; for
    None, the most recently active top-level session of the project/agent (issue 15 item 7)."""
    root = g.root()
    if arg is None:
        project, agent = g.project or DEFAULT_PROJECT, g.agent or DEFAULT_AGENT
        rows = list_sessions(root, project=project, agent=agent, limit=1, top_level=True)
        if not rows:
            raise CliError(f"no sessions yet for {project}/{agent} under {safe(str(root.home))}")
        return rows[0].session_id
    validate_id(arg, what="session id")
    try:
        root.trace_files(arg, project=g.project, agent=g.agent)
    except FileNotFoundError:
        return match_session_id(root, arg, g) or arg  # unknown: the caller reports it
    return arg
