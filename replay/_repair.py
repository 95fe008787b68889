"""Repair into a copy (SPEC R-TOOL-3): a damaged session's files, mended, in another directory.

Owns: reading the source files (never opened for writing), cutting a torn tail, dropping blank
and malformed lines, leaving a crash-residue latest file out (R-ROOT-10), giving every
``session_meta`` the id its file name carries (V-17), dropping each record the validator still
rejects (one finding at a time, so a drop that makes the next record valid is seen), closing a
dangling request or compaction span with the records resume would write (R-RESUME-14a,
R-RESUME-14), and writing the copy exclusively (0600 files; nothing is overwritten).  Every
change is listed.  Does not: touch the source, or write anything when nothing needed repair.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import msgspec

from eventstore import (
    HEAD_EVENT_TYPES,
    Diagnostic,
    OmniMessage,
    RequestEndPayload,
    SessionMetaPayload,
    create_private,
    encode,
    file_index,
    scan_trace,
)
from projections import ModelContext

from ._replay_llm import _session_files
from ._timetravel import Files
from ._validate import validate_session

__all__ = ["RepairChange", "RepairResult", "repair_trace"]

_ID_SAFE: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@dataclass(frozen=True, slots=True)
class RepairChange:
    """One change: ``path``/``line`` locate it in the source (line 0: the whole file)."""

    path: Path
    line: int
    action: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.action}"


@dataclass(frozen=True)
class RepairResult:
    """``files`` are the written copies (none when nothing needed repair); ``changes`` what
    was done, in source order."""

    source: list[Path]
    files: list[Path]
    changes: list[RepairChange]

    @property
    def changed(self) -> bool:
        return bool(self.changes)


@dataclass
class _File:
    source: Path
    index: int
    lines: list[tuple[int, bytes, OmniMessage]] = field(default_factory=list)
    physical: int = 0
    closures: list[bytes] = field(default_factory=list)


def _read(path: Path, index: int, changes: list[RepairChange]) -> _File:
    data = path.read_bytes()
    raw = data.split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    f = _File(path, index, physical=len(raw))
    problems: dict[int, Diagnostic] = {}
    for item in scan_trace(path):
        if isinstance(item, Diagnostic):
            problems[item.line] = item
        else:
            line, record = item
            f.lines.append((line, raw[line - 1], record))
    for n, text in enumerate(raw, start=1):
        found = problems.get(n)
        if found is not None and found.kind == "torn_tail":
            changes.append(RepairChange(path, n, f"cut torn tail ({len(text)} byte(s))"))
        elif found is not None:
            changes.append(RepairChange(path, n, f"dropped malformed line: {found.detail}"))
        elif not text.strip():
            changes.append(RepairChange(path, n, "dropped blank line"))
    return f


def _residue(f: _File) -> bool:
    records = [r for _, _, r in f.lines]
    if not any(r.type == "session_meta" for r in records):
        return True
    return f.index > 1 and all(
        r.type == "session_meta" or isinstance(r.payload, HEAD_EVENT_TYPES) for r in records
    )


def _name_id(path: Path) -> str | None:
    index = file_index(path)
    if index is None:
        return None
    sid = path.name.rsplit("_", 1)[0]
    return sid if sid and set(sid) <= _ID_SAFE and len(sid) <= 128 else None


def _fix_ids(f: _File, changes: list[RepairChange]) -> None:
    sid = _name_id(f.source)
    if sid is None:
        return
    for n, (line, _, record) in enumerate(f.lines):
        p = record.payload
        if isinstance(p, SessionMetaPayload) and p.session_id != sid:
            fixed = OmniMessage(
                record.timestamp, record.type, msgspec.structs.replace(p, session_id=sid)
            )
            f.lines[n] = (line, encode(fixed), fixed)
            changes.append(
                RepairChange(f.source, line, f"session_meta.session_id {p.session_id!r} -> {sid!r}")
            )


def _close_spans(f: _File) -> list[str]:
    """Set the closure records resume would append to ``f`` (its last file); name them."""
    closures = ModelContext.from_records([r for _, _, r in f.lines]).closure_records()
    f.closures = [encode(c) for c in closures]
    return [
        "closed the dangling request (R-RESUME-14a)"
        if isinstance(c.payload, RequestEndPayload)
        else "closed the dangling compaction (R-RESUME-14)"
        for c in closures
    ]


def _stage(files: list[_File], staging: Path) -> dict[Path, _File]:
    out: dict[Path, _File] = {}
    for f in files:
        target = staging / f.source.name
        body = b"".join(text + b"\n" for _, text, _ in f.lines) + b"".join(
            c + b"\n" for c in f.closures
        )
        target.write_bytes(body)
        out[target] = f
    return out


def _drop_rejected(files: list[_File], staging: Path, changes: list[RepairChange]) -> None:
    """Drop the first record each file's validation rejects, until none is rejected."""
    for _ in range(sum(len(f.lines) for f in files) + 1):
        _close_spans(files[-1])
        staged = _stage(files, staging)
        dropped = False
        done: set[Path] = set()
        for finding in validate_session(list(staged)):
            f = staged.get(finding.path)
            if finding.severity != "error" or f is None or finding.path in done:
                continue
            if not 1 <= finding.line <= len(f.lines):
                continue
            line, _, _ = f.lines.pop(finding.line - 1)
            changes.append(
                RepairChange(f.source, line, f"dropped record: {finding.rule} {finding.message}")
            )
            done.add(finding.path)
            dropped = True
        if not dropped:
            return


def repair_trace(source: Files, into: str | os.PathLike[str]) -> RepairResult:
    """Write a repaired copy of ``source`` (a trace file, a session's files or their directory)
    into the directory ``into``, under the same file names (SPEC R-TOOL-3).

    The source is only read.  Raises ``FileExistsError`` when ``into`` already holds one of
    the names.  When nothing needed repair, nothing is written and ``changed`` is False.
    """
    paths: Sequence[Path] = _session_files(source)
    out_dir = Path(into)
    for p in paths:
        if (out_dir / p.name).exists():
            raise FileExistsError(f"{out_dir / p.name} exists; repair never overwrites")
    changes: list[RepairChange] = []
    files = [_read(p, file_index(p) or n, changes) for n, p in enumerate(paths, start=1)]
    while files and _residue(files[-1]):
        gone = files.pop().source
        changes = [c for c in changes if c.path != gone]
        changes.append(RepairChange(gone, 0, "left out crash-residue file (R-ROOT-10)"))
    for f in files:
        _fix_ids(f, changes)
    staging = Path(tempfile.mkdtemp(prefix="penguin-repair-"))
    try:
        if files:
            _drop_rejected(files, staging, changes)
            last = files[-1]
            for action in _close_spans(last):
                changes.append(RepairChange(last.source, last.physical + 1, action))
        if not changes:
            return RepairResult(list(paths), [], [])
        out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        written: list[Path] = []
        for staged, f in _stage(files, staging).items():
            target = out_dir / f.source.name
            with create_private(target) as dst:
                dst.write(staged.read_bytes())
            written.append(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    changes.sort(key=lambda c: (paths.index(c.path), c.line))
    return RepairResult(list(paths), written, changes)
