"""Finding sessions: the listing behind ``penguin sessions``, "the latest session", and id
prefixes.

Owns: one walk of the data root (``DataRoot.sessions``), then one read of each listed
session's own files — never a search of the tree per session, so listing stays linear in the
number of sessions; a session whose files have not changed since the last listing is not read
again (``listcache``) — the listing's per-session summary (status, turns, first prompt, parent),
ordering by last activity, and resolving a unique id prefix.  Does not: print (``commands.sessions``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from eventstore import (
    HEAD_EVENT_TYPES,
    DataRoot,
    Diagnostic,
    RequestBeginPayload,
    RequestEndPayload,
    SessionInfo,
    SessionMetaPayload,
    SubagentPayload,
    TextPayload,
    file_index,
    lock_path_of,
    probe_lock,
    scan_trace,
)

from .diagnose import wrong_type
from .listcache import Cached, FileKey, ListCache, file_keys

if TYPE_CHECKING:
    from projections import SessionState

__all__ = ["SessionRow", "writer_holds", "list_sessions", "summarize"]

_PROMPT_CHARS: Final = 200
_TAIL_BYTES: Final = 1 << 20
# The record's own timestamp: the first key as every writer puts it (R-MSG-1).
_TIMESTAMP: Final = re.compile(rb'^\s*\{\s*"timestamp"\s*:\s*"([^"\\]{1,64})"')


@dataclass(slots=True)
class SessionRow:
    """One listed session.  ``status``: the one status (R-SET-5) — ``running`` (a run is open
    and a writer holds the lock), ``interrupted`` (a run left open by a crash), else how the
    last run ended (``completed``, ``max_turns``, ``aborted``, ``failed``, ``goal_*``…),
    ``idle`` (no run ended yet) — or ``unreadable``."""

    info: SessionInfo
    active: float
    latest: Path
    status: str = "idle"
    records: int = 0
    turns: int = 0
    first_prompt: str | None = None
    max_turns: bool = False  # the last task ended at its turn limit
    last_error: str | None = None  # the last request's error message (its label's source)
    workspace: str | None = None
    last_request_status: str | None = None
    task_running: bool = False
    is_child: bool = False
    open: bool = False
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


def writer_holds(trace_file: Path) -> bool:
    """Whether a writer has the session of ``trace_file`` open: asked of its lock (R-TRACE-18),
    never of the pid written in it (that outlives the writer).  A lock that cannot be probed
    (a planted symlink, no permission) counts as not held."""
    try:
        return probe_lock(lock_path_of(trace_file)).held
    except (OSError, ValueError):
        return False


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
        elif not isinstance(p, HEAD_EVENT_TYPES):
            kinds.add("other")
        if record.origin is None:
            if isinstance(p, SubagentPayload):
                row.children.append(p.session_id)
            elif row.first_prompt is None and isinstance(p, TextPayload) and p.role == "user":
                row.first_prompt = p.text[:_PROMPT_CHARS]
            if isinstance(p, TextPayload) and p.role == "assistant":
                # The last task ended at --max-turns when its last word is the notice.
                row.max_turns = p.stop_reason == "failed" and _is_max_turns(p.text)
            elif isinstance(p, RequestBeginPayload):
                row.max_turns = False
            elif isinstance(p, RequestEndPayload):
                row.last_error = p.error_message
        state.apply(record)
    residue = "session_meta" not in kinds or ((file_index(path) or 1) > 1 and "other" not in kinds)
    if last and residue:
        row.diagnostics.append(
            Diagnostic(path, 1, "empty_file", "crash residue (R-ROOT-10): ignored")
        )


def _is_max_turns(text: str) -> bool:
    from projections import markers as mk  # here: a listing from the cache needs none of it

    return mk.parse_max_turns_notice(text) is not None


def summarize(info: SessionInfo, active: float | None = None) -> SessionRow:
    """Read the session's own files once (no search of the root)."""
    from projections import SessionState

    files = info.files
    active = _mtime(files[-1]) if active is None else active
    row = SessionRow(info=info, active=active, latest=files[-1])
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
    row.open = state.run_open
    row.status = state.status  # the one status (R-SET-5)
    objective = state.goal.objective
    if objective is not None and (row.first_prompt or "").startswith("[goal]\nround: "):
        # A goal session's first input is its round block: the objective is its title.
        row.first_prompt = objective[:_PROMPT_CHARS]
    _open_status(row)
    return row


def last_record_time(path: Path) -> float | None:
    """The time of the last complete record of ``path`` (epoch seconds), read from the end of
    the file; None when there is no such record or its timestamp is not ISO 8601."""
    from datetime import UTC, datetime

    lines: list[bytes] = []
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            for span in (4096, 65536, _TAIL_BYTES):
                start = max(0, size - span)
                f.seek(start)
                lines = f.read(span).split(b"\n")[:-1]  # the unterminated end is no record
                if start > 0 and lines:
                    lines = lines[1:]  # cut mid-line
                lines = [line for line in lines if line.strip()]
                if lines or start == 0:
                    break
    except OSError:
        return None
    for line in reversed(lines):
        match = _TIMESTAMP.search(line)
        if match is None:
            continue
        try:
            when = datetime.fromisoformat(match.group(1).decode("ascii"))
        except (ValueError, UnicodeDecodeError):
            return None
        return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    return None


def last_activity(files: list[Path], keys: list[FileKey] | None) -> float:
    """When the session was last active: its last record's time, else (no readable time) the
    latest file's modification time."""
    for path in reversed(files[-2:]):  # the latest may be crash residue without a record
        found = last_record_time(path)
        if found is not None:
            return found
    return keys[-1][2] / 1e9 if keys else 0.0


def _open_status(row: SessionRow) -> None:
    """A session left open is ``running`` while a writer holds its lock, else ``interrupted``
    (decided at each listing, never cached)."""
    if row.open and row.error is None:
        row.status = "running" if writer_holds(row.latest) else "interrupted"
    elif row.status == "running":  # a cached row of a run that has ended since
        row.status = "interrupted"


def _to_cached(row: SessionRow, keys: list[FileKey]) -> Cached:
    return Cached(
        files=keys,
        status=row.status,
        open=row.open,
        records=row.records,
        turns=row.turns,
        first_prompt=row.first_prompt,
        workspace=row.workspace,
        last_request_status=row.last_request_status,
        task_running=row.task_running,
        is_child=row.is_child,
        children=row.children,
        diagnostics=[(str(d.path), d.line, d.kind, d.detail) for d in row.diagnostics],
        latest=str(row.latest),
        error=row.error,
        active=row.active,
        last_error=row.last_error,
    )


def _from_cached(info: SessionInfo, c: Cached) -> SessionRow:
    row = SessionRow(
        info=info,
        active=c.active if c.active is not None else c.files[-1][2] / 1e9,
        latest=next((f for f in reversed(info.files) if str(f) == c.latest), info.files[-1]),
        status=c.status,
        records=c.records,
        turns=c.turns,
        first_prompt=c.first_prompt,
        workspace=c.workspace,
        last_request_status=c.last_request_status,
        task_running=c.task_running,
        is_child=c.is_child,
        open=c.open,
        children=list(c.children),
        diagnostics=[Diagnostic(Path(p), n, k, d) for p, n, k, d in c.diagnostics],  # type: ignore[arg-type]
        error=c.error,
        last_error=c.last_error,
    )
    _open_status(row)
    return row


def list_sessions(
    root: DataRoot,
    *,
    project: str | None = None,
    agent: str | None = None,
    limit: int | None = None,
    top_level: bool = False,
    save: bool = False,
) -> list[SessionRow]:
    """Sessions by last activity (the time of the last record, issue 30: a copied or
    imported file's modification time says nothing), newest first.

    Only the ``limit`` most recently active are read whole (the others' last line only); with
    ``top_level`` subagent children are left out (they are then read to tell, so ``limit``
    counts top-level sessions).  Only with ``save`` (``penguin sessions``) is the summary cache
    written back."""
    infos = root.sessions(project=project, agent=agent)
    cache = ListCache(root.home)
    found: list[tuple[float, str, list[FileKey] | None, Cached | None, SessionInfo]] = []
    for info in infos:
        keys = file_keys(info.files)
        name = f"{info.project}/{info.agent}/{info.session_id}"
        hit = cache.get(name, keys) if keys is not None else None
        if hit is not None and hit.active is not None:
            active = hit.active
        else:
            active = last_activity(info.files, keys)
        found.append((active, info.session_id, keys, hit, info))
    found.sort(key=lambda t: (t[0], t[1]), reverse=True)
    rows: list[SessionRow] = []
    for active, _sid, keys, hit, info in found:
        if limit is not None and len(rows) >= limit:
            break
        name = f"{info.project}/{info.agent}/{info.session_id}"
        if hit is not None:
            row = _from_cached(info, hit)
        else:
            row = summarize(info, active)
            if keys is not None and row.error is None:
                cache.put(name, _to_cached(row, keys))
        if top_level and row.is_child:
            continue
        rows.append(row)
    if save:
        cache.save(complete=limit is None and project is None and agent is None)
    return rows
