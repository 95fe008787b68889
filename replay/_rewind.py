"""Rewind: the workspace and the conversation back to the end of a task (SPEC §27, R-SNAP-2/3).

Owns: finding a session's ``workspace_snapshot`` records and its tasks by position, planning a
rewind (which snapshot the point maps to; the files a restore creates, changes and deletes; the
files changed outside the session since its last snapshot), carrying it out — the conversation
forked at the task's final reply (``fork_session``: the original session is not touched) and the
workspace written back from the snapshot store — and ``collect_snapshots`` (``penguin gc``).
Does not: take snapshots (``engine``) or render a plan.

Which snapshot a point maps to: the last one recorded before the next task starts (the run-end
snapshot of that task, or the one before its last tool turn); a session whose tools had not run
yet by then maps to the first snapshot after the point (the workspace before any tool ran).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine import SnapshotSettings, scan_workspace
from eventstore import (
    DataRoot,
    OmniMessage,
    SessionMetaPayload,
    TextPayload,
    WorkspaceSnapshotPayload,
    file_index,
    lock_path_of,
    probe_lock,
    read_trace,
)
from eventstore.snapshots import SnapshotManifest, SnapshotStore, SnapshotStoreError
from projections.markers import is_task_starting

from ._fork import fork_session

__all__ = [
    "RewindPlan",
    "RewindRefused",
    "RewindResult",
    "SnapshotPoint",
    "TaskChanges",
    "TaskPoint",
    "collect_snapshots",
    "plan_rewind",
    "restore_workspace",
    "rewind_session",
    "session_timeline",
    "task_changes",
]


class RewindRefused(Exception):
    """A rewind that would overwrite changes made outside the session (R-SNAP-2)."""

    def __init__(self, message: str, *, session_id: str, outside: list[str]) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.outside = outside


@dataclass(frozen=True)
class SnapshotPoint:
    file: int
    ordinal: int
    id: str
    files: int
    bytes: int

    @property
    def file_pos(self) -> tuple[int, int]:
        return (self.file, self.ordinal)


@dataclass(frozen=True)
class TaskPoint:
    """A task by number (1-based) with the position of its last assistant reply (``None`` when
    it has none) and of the record that started the next task (``None`` for the last one)."""

    number: int
    prompt: str
    start: tuple[int, int]
    reply: tuple[int, int] | None
    next_start: tuple[int, int] | None


@dataclass
class Timeline:
    session_id: str
    workspace: Path
    project: str
    agent: str
    tasks: list[TaskPoint] = field(default_factory=list)
    snapshots: list[SnapshotPoint] = field(default_factory=list)


@dataclass(frozen=True)
class RewindPlan:
    session_id: str
    at: tuple[int, int]
    task: int
    workspace: Path
    snapshot: str | None
    create: list[str]
    change: list[str]
    delete: list[str]
    outside: list[str]  # changed since the session's last snapshot, by someone else

    @property
    def empty(self) -> bool:
        return not (self.create or self.change or self.delete)


@dataclass(frozen=True)
class RewindResult:
    plan: RewindPlan
    new_session_id: str


def session_timeline(root: DataRoot | str | os.PathLike[str] | None, session_id: str) -> Timeline:
    """The tasks and snapshots of a session, by trace position."""
    data_root = root if isinstance(root, DataRoot) else DataRoot(root)
    location = data_root.locate(session_id)
    files = data_root.trace_files(session_id, project=location.project, agent=location.agent)
    workspace: Path | None = None
    tl = Timeline(session_id, Path("."), location.project, location.agent)
    current: TaskPoint | None = None
    for path in files:
        index = file_index(path) or 1
        for ordinal, record in enumerate(read_trace(path, report=False).records):
            p = record.payload
            pos = (index, ordinal)
            if isinstance(p, SessionMetaPayload) and workspace is None:
                workspace = Path(p.workspace)
            elif isinstance(p, WorkspaceSnapshotPayload):
                tl.snapshots.append(SnapshotPoint(index, ordinal, p.id, p.files, p.bytes))
            elif is_task_starting(record):
                if current is not None:
                    tl.tasks.append(replace(current, next_start=pos))
                current = TaskPoint(len(tl.tasks) + 1, _prompt(record), pos, None, None)
            elif current is not None and _is_reply(record):
                current = replace(current, reply=pos)
    if current is not None:
        tl.tasks.append(current)
    tl.workspace = workspace or Path(".")
    return tl


def _prompt(record: OmniMessage) -> str:
    p = record.payload
    return p.text if isinstance(p, TextPayload) else "[image]"


def _is_reply(record: OmniMessage) -> bool:
    p = record.payload
    return (
        record.origin is None
        and isinstance(p, TextPayload)
        and p.role == "assistant"
        and bool(p.text.strip())
    )


def _resolve_point(tl: Timeline, to: tuple[int, int] | int) -> TaskPoint:
    if isinstance(to, bool):
        raise TypeError("rewind point: a task number or (file, ordinal)")
    if isinstance(to, int):
        if not 1 <= to <= len(tl.tasks):
            raise ValueError(
                f"cannot rewind session {tl.session_id} to task {to}: it has "
                f"{len(tl.tasks)} task(s), numbered from 1"
            )
        task = tl.tasks[to - 1]
        if task.reply is None:
            raise ValueError(f"cannot rewind to task {to}: it has no final reply")
        return task
    point = (int(to[0]), int(to[1]))
    for task in tl.tasks:
        if task.reply == point:
            return task
    raise ValueError(
        f"cannot rewind session {tl.session_id} to {to[0]}:{to[1]}: not the final reply of a "
        "task (use a task number, or FILE:ORDINAL of a task's last assistant text)"
    )


def _snapshot_for(tl: Timeline, task: TaskPoint) -> str | None:
    assert task.reply is not None
    before = [
        s for s in tl.snapshots if task.next_start is None or (s.file, s.ordinal) < task.next_start
    ]
    if before:
        return before[-1].id
    after = [s for s in tl.snapshots if (s.file, s.ordinal) > task.reply]
    return after[0].id if after else None


@dataclass(frozen=True)
class TaskChanges:
    """What one task did to the workspace, by its snapshots (for a rewind picker)."""

    task: int
    prompt: str
    reply: tuple[int, int] | None
    created: list[str]
    changed: list[str]
    deleted: list[str]


def task_changes(
    root: DataRoot | str | os.PathLike[str] | None, session_id: str
) -> list[TaskChanges]:
    """Each task with the files it created, changed and deleted: its state before its first
    tool ran against its state at its end (an empty list for a task that ran no tool)."""
    data_root = root if isinstance(root, DataRoot) else DataRoot(root)
    tl = session_timeline(data_root, session_id)
    store = SnapshotStore(data_root, project=tl.project, agent=tl.agent)
    out: list[TaskChanges] = []
    for task in tl.tasks:
        end = task.next_start
        inside = [
            s
            for s in tl.snapshots
            if s.file_pos >= task.start and (end is None or s.file_pos < end)
        ]
        created: list[str] = []
        changed: list[str] = []
        deleted: list[str] = []
        if len(inside) >= 2 and inside[0].id != inside[-1].id:
            try:
                a = store.read_manifest(inside[0].id).files
                b = store.read_manifest(inside[-1].id).files
            except SnapshotStoreError:
                a = b = {}
            created = sorted(n for n in b if n not in a)
            deleted = sorted(n for n in a if n not in b)
            changed = sorted(n for n in b if n in a and a[n].hash != b[n].hash)
        out.append(TaskChanges(task.number, task.prompt, task.reply, created, changed, deleted))
    return out


def _current(workspace: Path, exclude: Path) -> SnapshotManifest:
    """The workspace as it is now, hashed but not stored."""
    return scan_workspace(workspace, None, SnapshotSettings(), exclude=exclude).manifest


def _differs(a: SnapshotManifest, b: SnapshotManifest) -> list[str]:
    names = (set(a.files) | set(b.files)) - set(a.skipped) - set(b.skipped)
    out = []
    for name in sorted(names):
        x, y = a.files.get(name), b.files.get(name)
        if x is None or y is None or x.hash != y.hash:
            out.append(name)
    return out


def plan_rewind(
    root: DataRoot | str | os.PathLike[str] | None,
    session_id: str,
    *,
    to: tuple[int, int] | int,
    workspace: str | os.PathLike[str] | None = None,
) -> RewindPlan:
    """What ``rewind_session`` would do; writes nothing."""
    data_root = root if isinstance(root, DataRoot) else DataRoot(root)
    tl = session_timeline(data_root, session_id)
    task = _resolve_point(tl, to)
    assert task.reply is not None
    ws = Path(workspace) if workspace is not None else tl.workspace
    if not ws.is_dir():
        raise FileNotFoundError(f"workspace does not exist: {ws}")
    target_id = _snapshot_for(tl, task)
    store = SnapshotStore(data_root, project=tl.project, agent=tl.agent)
    now = _current(ws, data_root.home)
    outside: list[str] = []
    if tl.snapshots:
        outside = _differs(store.read_manifest(tl.snapshots[-1].id), now)
    create: list[str] = []
    change: list[str] = []
    delete: list[str] = []
    if target_id is not None:
        target = store.read_manifest(target_id)
        for name, entry in target.files.items():
            cur = now.files.get(name)
            if cur is None:
                create.append(name)
            elif cur.hash != entry.hash or cur.mode != entry.mode:
                change.append(name)
        delete = [n for n in now.files if n not in target.files and n not in target.skipped]
    return RewindPlan(
        session_id=session_id,
        at=task.reply,
        task=task.number,
        workspace=ws,
        snapshot=target_id,
        create=sorted(create),
        change=sorted(change),
        delete=sorted(delete),
        outside=outside,
    )


def rewind_session(
    root: DataRoot | str | os.PathLike[str] | None,
    session_id: str,
    *,
    to: tuple[int, int] | int,
    force: bool = False,
    workspace: str | os.PathLike[str] | None = None,
) -> RewindResult:
    """Restore the workspace to the snapshot at ``to`` and fork the conversation there
    (R-SNAP-2).  ``to`` is a task number (1-based) or the ``(file, ordinal)`` of a task's final
    reply.  Refuses with ``RewindRefused`` when files changed outside the session since its
    last snapshot, unless ``force``.  The original session is left as it was."""
    data_root = root if isinstance(root, DataRoot) else DataRoot(root)
    plan = plan_rewind(data_root, session_id, to=to, workspace=workspace)
    if plan.outside and not force:
        shown = ", ".join(plan.outside[:5]) + (" …" if len(plan.outside) > 5 else "")
        raise RewindRefused(
            f"{len(plan.outside)} file(s) changed outside session {session_id} since its last "
            f"snapshot: {shown} (use --force to overwrite them)",
            session_id=session_id,
            outside=plan.outside,
        )
    new_id = fork_session(data_root, session_id, at=plan.at)
    restore_workspace(data_root, plan)
    return RewindResult(plan=plan, new_session_id=new_id)


def restore_workspace(root: DataRoot | str | os.PathLike[str] | None, plan: RewindPlan) -> None:
    """Write the workspace back to ``plan``'s snapshot (a host that forks the conversation
    itself, as ``penguin serve`` does, calls this after its fork).  Every blob is read and
    checked before the first file is touched."""
    if plan.snapshot is None:
        return
    data_root = root if isinstance(root, DataRoot) else DataRoot(root)
    location = data_root.locate(plan.session_id)
    store = SnapshotStore(data_root, project=location.project, agent=location.agent)
    _restore(store, store.read_manifest(plan.snapshot), plan)


def _confined(ws: Path, name: str) -> Path:
    """``ws / name`` when its directory resolves inside the workspace: a restore never writes
    or deletes through a symlinked directory (one the model may have planted)."""
    path = ws / name
    real = ws.resolve()
    parent = path.parent.resolve()
    if parent != real and real not in parent.parents:
        raise RuntimeError(f"refusing to restore {name}: its directory leads outside {ws}")
    return path


def _restore(store: SnapshotStore, target: SnapshotManifest, plan: RewindPlan) -> None:
    ws = plan.workspace
    # Every blob is read (and checked against its hash) before the first file is touched.
    blobs = {n: store.read_blob(target.files[n].hash) for n in plan.create + plan.change}
    for name in plan.delete:
        path = _confined(ws, name)
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        _prune(path.parent, ws)
    for name, data in blobs.items():
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        path = _confined(ws, name)
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise RuntimeError(f"cannot restore {path}: something else than a file is there")
        tmp = path.with_name(f".{path.name}.rewind-{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.chmod(tmp, stat.S_IMODE(target.files[name].mode))
        os.replace(tmp, path)


def _prune(directory: Path, workspace: Path) -> None:
    """Remove directories a deletion left empty, up to the workspace."""
    while directory != workspace and workspace in directory.parents:
        try:
            directory.rmdir()
        except OSError:
            return
        directory = directory.parent


def collect_snapshots(
    root: DataRoot | str | os.PathLike[str] | None, *, dry_run: bool = False
) -> dict[str, int]:
    """``penguin gc`` (R-SNAP-3): remove the snapshot trees and blobs that no
    ``workspace_snapshot`` record of a kept session refers to, agent by agent.  An agent one of
    whose sessions a writer holds open is left alone (counted in ``skipped_agents``)."""
    data_root = root if isinstance(root, DataRoot) else DataRoot(root)
    keep: dict[tuple[str, str], set[str]] = {}
    busy: set[tuple[str, str]] = set()
    for info in data_root.sessions():
        ids = keep.setdefault((info.project, info.agent), set())
        if info.files and probe_lock(lock_path_of(info.files[-1])).held:
            # A live writer may be between storing a snapshot and recording it.
            busy.add((info.project, info.agent))
        for record in read_trace(info.files, report=False).records:
            if isinstance(record.payload, WorkspaceSnapshotPayload):
                ids.add(record.payload.id)
    totals = {"trees": 0, "blobs": 0, "bytes": 0, "skipped_agents": 0}
    for project_dir in _children(data_root.home):
        for agent_dir in _children(project_dir / "agents"):
            pair = (project_dir.name, agent_dir.name)
            if not (agent_dir / "agent_state" / "snapshots").is_dir():
                continue
            if pair in busy:
                totals["skipped_agents"] += 1
                continue
            try:
                store = SnapshotStore(data_root, project=pair[0], agent=pair[1])
            except ValueError:
                continue
            done = store.collect(keep.get(pair, set()), dry_run=dry_run)
            totals["trees"] += done.trees
            totals["blobs"] += done.blobs
            totals["bytes"] += done.bytes
    return totals


def _children(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return []
