"""Import (SPEC R-TOOL-5): a trace file from elsewhere becomes a session of this data root.

Owns: reading the file's ``session_meta`` id and requiring it filename-safe (R-ROOT-6) and new
to the root (any project or agent), validating the file under the name it will have
(V-checks; an error refuses it, with the findings), and placing its bytes unchanged as file
``_001`` of that session in the date directory of its first timestamp (local date, R-ROOT-3),
created exclusively with mode 0600.  Does not: repair (``repair_trace`` does) or resume.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import msgspec

from eventstore import DataRoot, SessionMetaPayload, create_private, scan_trace, validate_id

from ._validate import Finding, validate_session

__all__ = ["ImportRefused", "ImportResult", "import_trace"]


class ImportRefused(ValueError):
    """The file does not validate: ``findings`` holds the errors (and warnings)."""

    def __init__(self, message: str, *, findings: list[Finding]) -> None:
        super().__init__(message)
        self.findings = findings


@dataclass(frozen=True, slots=True)
class ImportResult:
    """Where the trace went; ``findings`` are the validator's warnings (errors refuse)."""

    session_id: str
    path: Path
    findings: list[Finding]


def _first(path: Path, shown: Path) -> tuple[str, str]:
    """``(session_id, first timestamp)`` read from the file's records."""
    sid: str | None = None
    first_ts: str | None = None
    for item in scan_trace(path):
        if not isinstance(item, tuple):
            continue
        record = item[1]
        first_ts = first_ts or record.timestamp
        if isinstance(record.payload, SessionMetaPayload):
            sid = record.payload.session_id
            break
    if sid is None or first_ts is None:
        raise ValueError(f"{shown}: no session_meta record; not a trace that can be imported")
    return sid, first_ts


def _rename_session(path: Path, new_id: str) -> None:
    """Rewrite the first ``session_meta`` line of ``path`` to name ``new_id``."""
    lines = path.read_bytes().split(b"\n")
    for n, raw in enumerate(lines):
        if b"session_meta" not in raw:
            continue
        try:
            obj = msgspec.json.decode(raw.strip())
        except msgspec.DecodeError:
            continue
        payload = obj.get("payload") if isinstance(obj, dict) else None
        if obj.get("type") == "session_meta" and isinstance(payload, dict):
            payload["session_id"] = new_id
            lines[n] = msgspec.json.encode(obj)
            path.write_bytes(b"\n".join(lines))
            return


def _date_dir(timestamp: str, path: Path) -> str:
    try:
        when = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{path}: first timestamp {timestamp!r} is not ISO 8601") from None
    if when.tzinfo is not None:
        when = when.astimezone()
    return when.strftime("%Y-%m-%d")


def _exists(root: DataRoot, sid: str) -> bool:
    try:
        root.locate(sid)
    except FileNotFoundError:
        return False
    except LookupError:  # under two agents: it exists twice
        return True
    return True


def import_trace(
    file: str | os.PathLike[str] | bytes,
    root: DataRoot | str | os.PathLike[str] | None = None,
    *,
    project: str | None = None,
    agent: str | None = None,
    new_id: bool = False,
) -> ImportResult:
    """Import one trace as a new session of ``root`` (SPEC R-TOOL-5).

    ``file`` is a path, or the file's content as ``bytes`` (an upload).  The bytes validated
    are the bytes written: the source is copied once, first.  Raises ``ValueError`` for an id
    that is not filename-safe or a trace without a ``session_meta``, ``FileExistsError`` when
    the session already exists in the root, and ``ImportRefused`` (a ``ValueError``) when the
    validator finds errors.

    ``new_id``: the session gets a new id (its ``session_meta`` rewritten to it, every other
    byte kept), so a copy of a session the root holds (a repaired one) can be imported beside
    it.
    """
    shown = Path("<upload>") if isinstance(file, bytes) else Path(file)
    data_root = root if isinstance(root, DataRoot) else DataRoot(root)
    with tempfile.TemporaryDirectory(prefix="penguin-import-") as tmp:
        raw = Path(tmp) / "source.jsonl"
        if isinstance(file, bytes):
            raw.write_bytes(file)
        else:
            shutil.copyfile(file, raw)
        sid, first_ts = _first(raw, shown)
        if new_id:
            sid = data_root.new_session_id()
            _rename_session(raw, sid)
        validate_id(sid, what="session id in session_meta")
        if _exists(data_root, sid):
            raise FileExistsError(f"session {sid} already exists under {data_root.home}")
        date = _date_dir(first_ts, shown)
        staged = raw.rename(Path(tmp) / f"{sid}_001.jsonl")
        findings = [
            Finding(shown, f.line, f.rule, f.severity, f.message)
            for f in validate_session([staged])
        ]
        errors = [f for f in findings if f.severity == "error"]
        if errors:
            raise ImportRefused(
                f"{shown}: refused, {len(errors)} validation error(s): "
                + "; ".join(str(e) for e in errors[:5]),
                findings=findings,
            )
        kwargs = {k: v for k, v in (("project", project), ("agent", agent)) if v is not None}
        target = data_root.trace_path(sid, 1, date=date, **kwargs)
        data_root.ensure_dir(target.parent)
        with create_private(target) as dst, open(staged, "rb") as source:
            shutil.copyfileobj(source, dst)
    return ImportResult(sid, target, findings)
