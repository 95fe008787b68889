"""Session fork: a new session cut at a completed task of an existing one (SPEC §14).

Owns: checking the fork point (R-FORK-1…4), refusing a session another writer holds
(R-FORK-5), copying the trace prefix under a new id with its ``session_meta`` records and
scratchpad attachment lines rewritten (R-FORK-6, R-FORK-7), copying the scratchpad, and
removing everything it created when any step fails (R-FORK-8).  Does not: resume the fork (it
is an ordinary session, resumed through ``resume_session`` on its first task, R-FORK-9), touch
the source (files are append-only, so the copied prefix cannot change under us), or take the
source's lock.

Files are copied line by line: records that need no rewrite keep their exact bytes (so a
data-URL image stays byte-identical, and a record this version does not know survives), and
the few that do are rewritten at the JSON level, keeping every key they had.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Generator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgspec

from eventstore import (
    CompactionBeginPayload,
    CompactionEndPayload,
    DataRoot,
    OmniMessage,
    RequestEndPayload,
    SessionLocked,
    TextPayload,
    complete_lines,
    create_private,
    decode,
    file_index,
    probe_lock,
    scan_trace,
    sync_dir,
)
from projections import ModelContext
from projections import markers as mk
from projections.markers import is_task_starting

__all__ = ["fork_session"]

_TMP_SUFFIX: Final = ".fork-tmp"
_FILE_MODE: Final = 0o600
_DIR_MODE: Final = 0o700
_ID_ATTEMPTS: Final = 8


def fork_session(
    root: DataRoot | str | os.PathLike[str] | None,
    session_id: str,
    *,
    at: tuple[int, int],
    project: str | None = None,
    agent: str | None = None,
) -> str:
    """Fork ``session_id`` at the trace coordinate ``at = (file_index, ordinal)`` and return the
    new session's id (R-FORK-1…9).

    ``at`` names the final assistant ``text`` of a completed task: ``file_index`` is the
    ``_NNN`` index of a trace file and ``ordinal`` the 0-based position of the record among that
    file's records (as ``read_trace`` of that one file lists them).  The fork holds files
    ``1..file_index`` (the last cut right after the task's closing records) and a copy of the
    scratchpad; the source is left untouched.

    Raises ``FileNotFoundError`` for an unknown session, ``ValueError`` for a fork point SPEC
    R-FORK-2…4 rejects (or a copied file that does not start with ``session_meta``), and
    ``SessionLocked`` while a writer holds the session (R-FORK-5): another process, or a
    ``Session`` of this process that has written — which is also what a running or compacting
    ``Session`` is, since its first record takes the lock.  Any failure while creating the fork
    removes what it created.
    """
    data_root = root if isinstance(root, DataRoot) else DataRoot(root)
    index, ordinal = _check_position(at)
    location = data_root.locate(session_id, project=project, agent=agent)
    files = {
        file_index(p) or 0: p
        for p in data_root.trace_files(session_id, project=location.project, agent=location.agent)
    }
    where = f"cannot fork session {session_id} at ({index}, {ordinal})"
    if index not in files:
        raise ValueError(f"{where}: the session has no trace file with index {index}")
    _probe_lock(data_root, session_id, location.project, location.agent, files)

    plan = _plan(files, index, ordinal, where)

    old_scratch = data_root.scratchpad(session_id, project=location.project, agent=location.agent)
    new_id = _new_id(data_root, old_scratch.parent)
    new_scratch = old_scratch.parent / new_id
    rewriter = _Rewriter(session_id, new_id, old_scratch, new_scratch)
    created = _Created()
    try:
        _copy_scratchpad(data_root, old_scratch, new_scratch, created)
        for source, cut in plan:
            target = data_root.trace_path(
                new_id,
                file_index(source) or 1,
                project=location.project,
                agent=location.agent,
                date=source.parent.name,
            )
            _copy_trace(data_root, source, target, cut, rewriter, created)
        for directory in created.synced_dirs:
            sync_dir(directory)
    except BaseException:
        created.remove()
        raise
    return new_id


# --------------------------------------------------------------------------- checks


def _check_position(at: object) -> tuple[int, int]:
    """R-FORK-1: a coordinate of two non-negative ints, the file index from 1."""
    if (
        not isinstance(at, tuple | list)
        or len(at) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in at)
    ):
        raise ValueError(f"invalid fork point {at!r}: expected (file_index, ordinal), two ints")
    index, ordinal = (int(v) for v in at)
    if index < 1 or ordinal < 0:
        raise ValueError(f"invalid fork point {at!r}: file_index starts at 1 and ordinal at 0")
    return index, ordinal


def _probe_lock(
    root: DataRoot, session_id: str, project: str, agent: str, files: dict[int, Path]
) -> None:
    """R-FORK-5: refuse while a writer holds the session's lock (asked of the lock itself,
    ``eventstore.probe_lock``; the fork holds no lock).  A symlinked lock file is refused
    (R-ROOT-9)."""
    dates = {p.parent.name for p in files.values()}
    for date in sorted(dates):
        path = root.lock_path(session_id, project=project, agent=agent, date=date)
        probe = probe_lock(path)
        if probe.held:
            raise SessionLocked(session_id=session_id, holder_pid=probe.holder_pid, path=path)


def _records(path: Path) -> Generator[tuple[int, OmniMessage], None, None]:
    """``(line_no, record)`` of one file, as ``read_trace`` sees it (torn tail dropped)."""
    items = scan_trace(path)
    try:
        for item in items:
            if isinstance(item, tuple):
                yield item
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()  # an early stop must not leave the file open until collection


def _plan(
    files: dict[int, Path], index: int, ordinal: int, where: str
) -> list[tuple[Path, int | None]]:
    """R-FORK-2…5 over the records: the files to copy, each with the physical line after which
    it is cut (``None``: every complete line)."""
    in_compaction = False
    plan: list[tuple[Path, int | None]] = []
    for i in sorted(k for k in files if k < index):
        path = files[i]
        first = True
        for _line, record in _records(path):
            if first:
                _require_meta(record, path, where)
                first = False
            in_compaction = _compaction_state(record, in_compaction)
        if first:
            raise ValueError(f"{where}: {path.name} holds no records")
        plan.append((path, None))

    path = files[index]
    ctx = ModelContext()
    named: OmniMessage | None = None
    cut_line = 0
    position = -1
    completed_end = False
    records = _records(path)
    for position, (line, record) in enumerate(records):
        if position == 0:
            _require_meta(record, path, where)
        if named is None:
            if position == ordinal:
                # R-FORK-2: a complete, non-blank assistant text outside any compaction span.
                if not _is_reply(record):
                    raise ValueError(
                        f"{where}: record {ordinal} of {path.name} is not a complete assistant "
                        "text with non-blank text"
                    )
                if in_compaction:
                    raise ValueError(f"{where}: the record lies inside a compaction span")
                named = record
            else:
                in_compaction = _compaction_state(record, in_compaction)
        else:
            # R-FORK-3: scan to the next task or compaction; the reply must end its task.
            p = record.payload
            if is_task_starting(record) or isinstance(p, CompactionBeginPayload):
                break
            if _is_reply(record):
                raise ValueError(
                    f"{where}: the record is not the final reply of its task (another "
                    f"assistant text follows at line {line} of {path.name})"
                )
            if isinstance(p, RequestEndPayload):
                if p.status != "completed":
                    raise ValueError(
                        f"{where}: the task did not complete (request_end {p.status!r} at line "
                        f"{line} of {path.name})"
                    )
                completed_end = True
        ctx.apply(record)
        cut_line = line
    records.close()
    if named is None:
        count = position + 1
        raise ValueError(f"{where}: {path.name} has {count} record(s); no record {ordinal}")
    if not completed_end:
        raise ValueError(f"{where}: no completed request_end follows the record")
    # R-FORK-4: the cut prefix must be a context at rest that holds the reply.
    if ctx.closed or ctx.pending or not any(m is named for m in ctx.history):
        raise ValueError(
            f"{where}: the cut would leave an interrupted context (carry-over, an open span or "
            "a closed context); fork at the reply of a task that ended normally"
        )
    plan.append((path, cut_line))
    return plan


def _require_meta(record: OmniMessage, path: Path, where: str) -> None:
    if record.type != "session_meta":
        raise ValueError(f"{where}: {path.name} does not start with session_meta (R-FORK-5)")


def _compaction_state(record: OmniMessage, open_: bool) -> bool:
    p = record.payload
    if isinstance(p, CompactionBeginPayload):
        return True
    if isinstance(p, CompactionEndPayload):
        return False
    return open_


def _is_reply(record: OmniMessage) -> bool:
    p = record.payload
    return (
        record.origin is None
        and isinstance(p, TextPayload)
        and p.role == "assistant"
        and bool(p.text.strip())
    )


def _new_id(root: DataRoot, scratch_parent: Path) -> str:
    """R-FORK-6: a fresh id (R-ROOT-5) that names no session or scratchpad yet."""
    for _ in range(_ID_ATTEMPTS):
        candidate = root.new_session_id()
        try:
            root.locate(candidate)
        except FileNotFoundError:
            if not (scratch_parent / candidate).exists():
                return candidate
    raise FileExistsError("could not allocate an unused session id for the fork")


# --------------------------------------------------------------------------- rewriting


class _Rewriter:
    """R-FORK-7: new id in ``session_meta``, scratchpad paths in attachment lines."""

    def __init__(self, old_id: str, new_id: str, old_scratch: Path, new_scratch: Path) -> None:
        self.old_id = old_id
        self.new_id = new_id
        # Attachment lines hold the resolved scratchpad path (R-IMG-1); system prompts may hold
        # either spelling.
        pairs = [(old_scratch.as_posix(), new_scratch.as_posix())]
        real_parent = Path(os.path.realpath(old_scratch.parent))
        resolved = ((real_parent / old_id).as_posix(), (real_parent / new_id).as_posix())
        if resolved[0] != pairs[0][0]:
            pairs.append(resolved)
        self.paths = pairs

    def line(self, raw: bytes) -> bytes:
        """The line to write for ``raw`` (without its newline)."""
        if b"session_meta" not in raw and b"attached" not in raw:
            return raw
        try:
            record = decode(raw)
        except Exception:
            return raw  # a malformed line is copied as it is, like every other line
        if record.type == "session_meta":
            return self._meta(raw)
        p = record.payload
        if isinstance(p, TextPayload) and p.role == "user" and record.origin is None:
            text = self.attachments(p.text)
            if text != p.text:
                obj = _json_object(raw)
                payload = obj.get("payload")
                if isinstance(payload, dict):
                    payload["text"] = text
                    return msgspec.json.encode(obj)
        return raw

    def _meta(self, raw: bytes) -> bytes:
        obj = _json_object(raw)
        payload = obj.get("payload")
        if not isinstance(payload, dict):
            return raw
        payload["session_id"] = self.new_id
        prompt = payload.get("system_prompt")
        if isinstance(prompt, str):
            for old, new in self.paths:
                prompt = prompt.replace(old, new)
            payload["system_prompt"] = prompt.replace(self.old_id, self.new_id)
        payload.pop("source", None)
        return msgspec.json.encode(obj)

    def attachments(self, text: str) -> str:
        if "[attached " not in text:
            return text
        lines = text.split("\n")
        changed = False
        for i, line in enumerate(lines):
            attached = mk.parse_attached_line(line)
            if attached is None:
                continue
            kind, target = attached
            for old, new in self.paths:
                if target == old or target.startswith(old + "/"):
                    lines[i] = mk.attached_line(kind, f"{new}{target[len(old) :]}")
                    changed = True
                    break
        return "\n".join(lines) if changed else text


def _json_object(raw: bytes) -> dict[str, Any]:
    obj = msgspec.json.decode(raw.strip())
    if not isinstance(obj, dict):
        raise ValueError("a record line is not a JSON object")
    return obj


# --------------------------------------------------------------------------- writing


@dataclass
class _Created:
    """Everything the fork created so far, for the rollback (R-FORK-8)."""

    files: list[Path] = field(default_factory=list)
    trees: list[Path] = field(default_factory=list)
    dirs: list[Path] = field(default_factory=list)
    synced_dirs: set[Path] = field(default_factory=set)

    def remove(self) -> None:
        for path in reversed(self.files):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError:
                pass  # best effort: the original error is what the caller needs
        for tree in reversed(self.trees):
            shutil.rmtree(tree, ignore_errors=True)
        for directory in reversed(self.dirs):
            try:
                directory.rmdir()
            except OSError:
                pass  # not empty: something else lives there now


def _ensure_dir(root: DataRoot, path: Path, created: _Created) -> None:
    """``DataRoot.ensure_dir`` (0700 for what it creates), remembering the new levels."""
    missing: list[Path] = []
    level = path
    while not level.exists() and level != level.parent:
        missing.append(level)
        level = level.parent
    root.ensure_dir(path)
    created.dirs.extend(reversed(missing))


def _copy_scratchpad(root: DataRoot, source: Path, target: Path, created: _Created) -> None:
    """R-FORK-8: a recursive snapshot; a missing source is an empty one (nothing to create)."""
    if not source.is_dir():
        return
    _ensure_dir(root, target.parent, created)
    created.trees.append(target)
    # copytree refuses an existing target, so nothing of another session is overwritten.
    shutil.copytree(source, target, symlinks=True, ignore=_special_files)
    for dirpath, _dirnames, filenames in os.walk(target):
        os.chmod(dirpath, _DIR_MODE)
        for name in filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                # Private like every file of the store (R-ROOT-9); the owner's x bit survives.
                os.chmod(path, (stat.S_IMODE(st.st_mode) & 0o700) | _FILE_MODE)


def _special_files(directory: str, names: list[str]) -> list[str]:
    """Sockets, FIFOs and devices are not snapshot material (copying a FIFO would block)."""
    skipped = []
    for name in names:
        mode = os.lstat(os.path.join(directory, name)).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            skipped.append(name)
    return skipped


def _copy_trace(
    root: DataRoot,
    source: Path,
    target: Path,
    cut: int | None,
    rewriter: _Rewriter,
    created: _Created,
) -> None:
    """R-FORK-6/7: the complete lines of ``source`` up to physical line ``cut`` (all when
    ``None``), rewritten, into ``target``, created exclusively.

    The lines go to a temporary name first, which is then hard-linked to the final name
    (``link`` fails if the name exists) — so a crash never leaves a half-copied file that
    would read as a session with a torn history.
    """
    _ensure_dir(root, target.parent, created)
    tmp = target.with_name(f".{target.name}{_TMP_SUFFIX}")
    out = create_private(tmp)
    created.files.append(tmp)
    with out, closing(complete_lines(source)) as lines:
        for n, raw in lines:
            out.write(rewriter.line(raw))
            out.write(b"\n")
            if cut is not None and n >= cut:
                break
        out.flush()
        os.fsync(out.fileno())
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise FileExistsError(
            errno.EEXIST, "refusing to overwrite an existing trace file", str(target)
        ) from None
    created.files.append(target)
    os.unlink(tmp)
    created.files.remove(tmp)
    created.synced_dirs.add(target.parent)
