"""Closed trace files on object storage: the archive record, moving files there and back.

Owns: uploading a session's closed files to any fsspec URL (``s3://bucket/prefix`` through
s3fs), verifying each upload by reading it back and comparing its SHA-256, removing the local
copy only after the record of where it went is durable, the per-session archive record
``<traces>/<date>/<session_id>.archived.json`` (the only place that says where a file went), and
fetching an archived file back into its place when a reader needs it (hash-verified, never
replacing a file that exists).  Does not: list sessions (``DataRoot``'s walk asks
``fetch_missing`` for what a directory's record names), decide what a record means, or hold
credentials: fsspec/botocore find those in the environment or their own configuration, and
nothing here writes them anywhere.

Why a record beside the trace files: ``DataRoot`` already scans each ``traces/<date>``
directory, so it sees the record in the same listing and every reader above the store (the
CLI, the server, analytics, resume) gets the archived files back without a change.  A file
fetched back keeps its record entry: archiving it again then only checks the hash and removes
the local copy.  A local file that differs from its entry (a resumed session appended to it) is
the truth, and is uploaded again by the next archive.

Archiving and writing are serialized by the session lock: ``archive_session`` lists and removes
files only while holding it, and a writer that takes it checks the record before it opens its
file (``fetch_to_write``).  A writer chooses its file before it locks (resume finds the latest),
so an archive can remove that file in between; opening it then would start an empty file under
its name, which every reader would take for the truth and the archived content would be hidden.

fsspec and s3fs are imported on first use (the ``archive`` extra), never by ``import eventstore``.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
import warnings
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal
from urllib.parse import urlsplit, urlunsplit

import msgspec

from ._dirs import sync_dir
from ._exceptions import ArchiveError
from ._lock import probe_lock, take_lock
from ._names import parse_trace_name
from ._private import create_private, write_private

if TYPE_CHECKING:
    from ._layout import DataRoot

__all__ = [
    "RECORD_SUFFIX",
    "ArchiveError",
    "ArchiveOutcome",
    "ArchiveWarning",
    "ArchivedFile",
    "archive_session",
    "archived_entry",
    "archived_files",
    "fetch_missing",
    "fetch_to_write",
    "idle_sessions",
    "read_record",
    "record_path",
    "restore_records",
    "RestoreOutcome",
]

RECORD_SUFFIX: Final = ".archived.json"
_CHUNK: Final = 1 << 20


class ArchiveWarning(UserWarning):
    """A listing left out a session whose archived files could not be fetched back."""


class ArchivedFile(msgspec.Struct, frozen=True, kw_only=True):
    """One archived trace file: where it went and what it was.  ``endpoint_url`` is the object
    store's address when not the provider's default (no credentials: those stay in the
    environment); ``mtime_ns`` is given back to the file when it is fetched, so a fetched file
    looks unchanged to whatever compared its size and modification time before."""

    name: str
    url: str
    sha256: str
    size: int
    mtime_ns: int
    archived_at: str
    endpoint_url: str | None = None


class _Record(msgspec.Struct, kw_only=True):
    version: int = 1
    session_id: str
    files: list[ArchivedFile] = msgspec.field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ArchiveOutcome:
    """What ``archive_session`` did with one file: ``archived`` (uploaded, verified, local copy
    removed), ``evicted`` (already archived with this hash: local copy removed), or ``kept``
    (the local file stays; ``error`` says why)."""

    path: Path
    url: str
    status: Literal["archived", "evicted", "kept"]
    size: int
    error: str | None = None


def record_path(directory: Path, session_id: str) -> Path:
    """``<directory>/<session_id>.archived.json``."""
    return directory / f"{session_id}{RECORD_SUFFIX}"


def read_record(path: Path) -> list[ArchivedFile]:
    """The entries of an archive record; ``[]`` when there is none.  A record that does not
    decode raises ``ArchiveError`` naming it: it is never rewritten blindly."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    try:
        return msgspec.json.decode(data, type=_Record).files
    except msgspec.DecodeError as exc:
        raise ArchiveError(f"unreadable archive record: {exc}", path=path) from None


def _write_record(path: Path, session_id: str, files: list[ArchivedFile]) -> bytes:
    """Replace the record durably (fsync of the file and its directory): it is the only place
    that says where a removed file went, so it must be on disk before the file goes.  Returns
    what was written."""
    ordered = sorted(files, key=lambda f: parse_trace_name(f.name) or (f.name, 0))
    data = msgspec.json.encode(_Record(session_id=session_id, files=ordered)) + b"\n"
    write_private(path, data, sync=True)
    return data


def archived_files(
    root: DataRoot, session_id: str, *, project: str | None = None, agent: str | None = None
) -> list[ArchivedFile]:
    """The archive record of a session (``[]`` when nothing of it is archived)."""
    loc, _local = root._local_files(session_id, project=project, agent=agent)
    directory = root.traces_dir(loc.project, loc.agent) / loc.date
    return read_record(record_path(directory, session_id))


# --------------------------------------------------------------------------- the object store


def _filesystem(
    url: str, *, endpoint_url: str | None, storage_options: Mapping[str, Any] | None
) -> tuple[Any, str]:
    """``(fsspec filesystem, path in it)`` for ``url``.  ``storage_options`` go to the
    filesystem as given; an ``endpoint_url`` is s3fs's ``endpoint_url``."""
    try:
        from fsspec.core import url_to_fs  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - the extra is in every test install
        raise ArchiveError(
            "archiving needs fsspec and s3fs: pip install 'penguin-engine[archive]'", url=url
        ) from None
    options = dict(storage_options or {})
    if endpoint_url is not None:
        options.setdefault("endpoint_url", endpoint_url)
    try:
        fs, path = url_to_fs(url, **options)
    except (ImportError, ValueError) as exc:
        raise ArchiveError(f"no filesystem for {url}: {exc}", url=url) from None
    return fs, path


def _sha256_file(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _sha256_remote(fs: Any, path: str) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with fs.open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


# --------------------------------------------------------------------------- archiving


def archive_session(
    root: DataRoot,
    session_id: str,
    *,
    to: str,
    project: str | None = None,
    agent: str | None = None,
    endpoint_url: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    fs: Any = None,
) -> list[ArchiveOutcome]:
    """Move every local trace file of an idle session to ``<to>/<project>/<agent>/<date>/<name>``.

    Done while holding the session lock, so a session a writer has open raises
    ``SessionLocked`` and nothing moves, and no writer can open it meanwhile: every file of a
    session nobody writes is closed and immutable.  For each file, oldest first: upload, read
    back and compare SHA-256 and size, record the entry durably, then remove the local copy.  A
    failed upload or a differing hash keeps the local file (``status="kept"``) and the files
    after it are still tried.  A file already archived with the same hash is not uploaded again
    (``evicted``).  ``fs`` is an fsspec filesystem to use instead of one made from ``to``."""
    _no_secrets(to)
    if endpoint_url is not None:
        _no_secrets(endpoint_url)
    loc, _local = root._local_files(session_id, project=project, agent=agent)
    directory = root.traces_dir(loc.project, loc.agent) / loc.date
    record = record_path(directory, session_id)
    base = to.rstrip("/")
    if fs is None:
        fs, base_path = _filesystem(
            base, endpoint_url=endpoint_url, storage_options=storage_options
        )
    else:
        base_path = fs._strip_protocol(base)
    where = f"{loc.project}/{loc.agent}/{loc.date}"
    fd = take_lock(directory / f"{session_id}.lock", session_id=session_id, sync=False)
    try:
        # Listed again under the lock: a writer that ran between the first listing and the
        # lock may have rotated into a new file.
        local = root._local_files(session_id, project=loc.project, agent=loc.agent)[1]
        entries = {e.name: e for e in read_record(record)}
        outcomes: list[ArchiveOutcome] = []
        for path in local:
            url, remote = f"{base}/{where}/{path.name}", f"{base_path}/{where}/{path.name}"
            outcome, entry = _archive_file(
                fs, path, url, remote, entries.get(path.name), endpoint_url=endpoint_url
            )
            if entry is not None:
                entries[path.name] = entry
            outcomes.append(outcome)
        if not entries:
            return outcomes
        data = _write_record(record, session_id, list(entries.values()))
        # The record goes to the bucket too, beside the files (``restore_records``): before
        # any local file is removed, so whatever left this disk is described where it went.
        failure = _put_manifest(fs, f"{base_path}/{where}/{record.name}", data)
        moved = [o for o in outcomes if o.status != "kept"]
        if failure is not None:
            if not moved:
                warnings.warn(
                    f"{session_id}: the archive record was not copied to {base}: {failure}",
                    ArchiveWarning,
                    stacklevel=2,
                )
            error = f"the session's record could not be copied to the bucket: {failure}"
            return [
                ArchiveOutcome(o.path, o.url, "kept", o.size, error) if o in moved else o
                for o in outcomes
            ]
        for o in moved:
            o.path.unlink()
        if moved:
            sync_dir(directory)
        return outcomes
    finally:
        os.close(fd)


def _put_manifest(fs: Any, remote: str, data: bytes) -> str | None:
    """Write the session's record as an object and read it back; why not, or ``None``."""
    try:
        fs.pipe_file(remote, data)
        there = fs.cat_file(remote)
    except Exception as exc:
        return _describe(exc)
    return None if there == data else "the object read back differs"


@dataclass(frozen=True, slots=True)
class RestoreOutcome:
    """What ``restore_records`` did with one session's record found in the bucket:
    ``restored`` (written into the data root), ``present`` (the root already has the session:
    left as it is) or ``refused`` (``error`` says why: nothing written)."""

    session_id: str
    project: str
    agent: str
    date: str
    status: Literal["restored", "present", "refused"]
    files: int
    error: str | None = None


def restore_records(
    root: DataRoot,
    url: str,
    *,
    sessions: Collection[str] | None = None,
    endpoint_url: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    fs: Any = None,
) -> list[RestoreOutcome]:
    """Make the sessions archived under ``url`` -- by this machine or any other -- readable in
    ``root``.  ``archive_session`` leaves each session's record beside its files in the bucket
    (``<url>/<project>/<agent>/<date>/<session_id>.archived.json``); each one found (of
    ``sessions`` only, when given) is written into the data root as the session's archive
    record, and nothing else: every reader then lists the session and fetches a file back when
    it first needs it, checked against the record's SHA-256, as on the machine that archived it.

    A session the root already has (a trace file or a record of it) is left as it is
    (``present``).  A record is refused, and nothing written, when it does not decode, when a
    path component or a file name is not a data root's (R-ROOT-4, R-ROOT-6), or when a file's
    URL is not of ``url``'s scheme or its server is not ``endpoint_url``: a record from a bucket
    decides only which object of that store a file is fetched from."""
    _no_secrets(url)
    if endpoint_url is not None:
        _no_secrets(endpoint_url)
    base = url.rstrip("/")
    if fs is None:
        fs, base_path = _filesystem(
            base, endpoint_url=endpoint_url, storage_options=storage_options
        )
    else:
        base_path = fs._strip_protocol(base)
    try:
        found = sorted(str(p) for p in fs.glob(f"{base_path}/*/*/*/*{RECORD_SUFFIX}"))
    except Exception as exc:
        raise ArchiveError(f"cannot list {base}: {_describe(exc)}", url=base) from None
    scheme = urlsplit(base).scheme or "file"
    outcomes: list[RestoreOutcome] = []
    for found_path in found:
        parts = found_path[len(str(base_path).rstrip("/")) + 1 :].split("/")
        if len(parts) != 4:
            continue
        session_id = parts[3].removesuffix(RECORD_SUFFIX)
        if sessions is None or session_id in sessions:
            where = RestoreOutcome(session_id, parts[0], parts[1], parts[2], "refused", 0)
            outcomes.append(_restore_one(root, fs, found_path, where, scheme, endpoint_url))
    return outcomes


def _restore_one(
    root: DataRoot,
    fs: Any,
    found: str,
    where: RestoreOutcome,
    scheme: str,
    endpoint_url: str | None,
) -> RestoreOutcome:
    from ._layout import validate_id  # here: _layout imports this module

    try:
        for part, what in (
            (where.project, "project"),
            (where.agent, "agent"),
            (where.date, "date"),
        ):
            validate_id(part, what=what)
        validate_id(where.session_id, what="session id")
        entries = _checked(fs.cat_file(found), where.session_id, scheme, endpoint_url)
    except (ValueError, ArchiveError) as exc:
        return replace(where, error=str(exc))
    except Exception as exc:
        return replace(where, error=f"cannot read it: {_describe(exc)}")
    try:
        root._local_files(where.session_id, project=None, agent=None)
    except FileNotFoundError:
        pass
    except LookupError:  # in several places already
        return replace(where, status="present", files=len(entries))
    else:
        return replace(where, status="present", files=len(entries))
    directory = root.traces_dir(where.project, where.agent) / where.date
    _write_record(record_path(directory, where.session_id), where.session_id, entries)
    return replace(where, status="restored", files=len(entries))


def _checked(
    data: bytes, session_id: str, scheme: str, endpoint_url: str | None
) -> list[ArchivedFile]:
    """The entries of a record read from a bucket, each checked (``restore_records``)."""
    try:
        record = msgspec.json.decode(data, type=_Record)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ArchiveError(f"not an archive record: {exc}") from None
    if record.session_id != session_id:
        raise ArchiveError(f"it is the record of another session ({record.session_id!r})")
    for entry in record.files:
        parsed = parse_trace_name(entry.name)
        if parsed is None or parsed[0] != session_id or "/" in entry.name:
            raise ArchiveError(f"{entry.name!r} is not a trace file of {session_id}")
        if (urlsplit(entry.url).scheme or "file") != scheme:
            raise ArchiveError(f"{entry.name}: its URL {entry.url!r} is not a {scheme} URL")
        if entry.endpoint_url != endpoint_url:
            raise ArchiveError(
                f"{entry.name}: fetched from {entry.endpoint_url!r}, not from "
                f"{endpoint_url!r} (give --endpoint-url as it was archived)"
            )
    return record.files


def _no_secrets(url: str) -> None:
    """Refuse a URL that carries credentials or a query (a signature, a token): the URLs are
    written into the archive record, and credentials belong to the environment."""
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None or parts.query:
        shown = urlunsplit((parts.scheme, parts.hostname or "", parts.path, "", ""))
        raise ArchiveError(
            f"{shown}: a URL with credentials or a query string is not accepted (it would be "
            "recorded); give credentials through the environment (AWS_ACCESS_KEY_ID, "
            "AWS_PROFILE, …)",
            url=shown,
        )


def _archive_file(
    fs: Any,
    path: Path,
    url: str,
    remote: str,
    entry: ArchivedFile | None,
    *,
    endpoint_url: str | None,
) -> tuple[ArchiveOutcome, ArchivedFile | None]:
    """Upload and verify one file: ``(outcome, the new record entry or None)``."""
    stat = path.stat()
    sha, size = _sha256_file(path)
    if entry is not None and entry.sha256 == sha and entry.size == size:
        # Fetched back earlier and unchanged: the object is there already.  Check that it still
        # is before the only local copy goes.
        try:
            there = fs.size(_strip(fs, entry.url))
        except Exception as exc:
            return ArchiveOutcome(path, entry.url, "kept", size, _describe(exc)), None
        if there == size:
            return ArchiveOutcome(path, entry.url, "evicted", size), None
    try:
        fs.makedirs(fs._parent(remote), exist_ok=True)  # a no-op on object stores
        fs.put_file(str(path), remote)
        got, got_size = _sha256_remote(fs, remote)
    except Exception as exc:
        return ArchiveOutcome(path, url, "kept", size, f"upload failed: {_describe(exc)}"), None
    if (got, got_size) != (sha, size):
        detail = f"hash differs after upload (sha256 {got[:12]}…, {got_size} bytes; local {sha[:12]}…, {size} bytes)"
        return ArchiveOutcome(path, url, "kept", size, detail), None
    new = ArchivedFile(
        name=path.name,
        url=url,
        sha256=sha,
        size=size,
        mtime_ns=stat.st_mtime_ns,
        archived_at=datetime.now(UTC).isoformat(timespec="seconds"),
        endpoint_url=endpoint_url,
    )
    return ArchiveOutcome(path, url, "archived", size), new


def _strip(fs: Any, url: str) -> str:
    return str(fs._strip_protocol(url))


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text


def idle_sessions(
    root: DataRoot,
    *,
    days: float,
    project: str | None = None,
    agent: str | None = None,
    now: float | None = None,
) -> list[tuple[str, str, str]]:
    """``(session_id, project, agent)`` of every session with local trace files, none of them
    modified in the last ``days`` days, whose lock no writer holds; oldest first."""
    cutoff = (time.time() if now is None else now) - days * 86400
    newest: dict[tuple[str, str, str], float] = {}
    locks: dict[tuple[str, str, str], Path] = {}
    for proj, ag, _date, sid, _index, path in root._walk(project, agent, archived="skip"):
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            continue
        key = (sid, proj, ag)
        newest[key] = max(newest.get(key, mtime), mtime)
        locks[key] = path.parent / f"{sid}.lock"
    idle = [k for k, m in newest.items() if m < cutoff and not probe_lock(locks[k]).held]
    return sorted(idle, key=lambda k: (newest[k], k))


# --------------------------------------------------------------------------- fetching back


def fetch_missing(
    directory: Path, session_id: str, present: set[str], *, fetch: bool = True
) -> list[Path]:
    """Fetch every file the session's archive record in ``directory`` names that is not in
    ``present`` (names found there) back into ``directory``; return their paths (without
    ``fetch``: only the paths, nothing is fetched — a listing that needs no content).

    Each is downloaded to a private temporary file, checked against the recorded SHA-256 and
    size, given its recorded modification time, made durable and then linked to its name, so a
    file that appeared meanwhile (another reader fetched it, a writer resumed it) is never
    replaced.  Raises ``ArchiveError`` naming the file and its URL when it cannot be fetched."""
    fetched: list[Path] = []
    for entry in read_record(record_path(directory, session_id)):
        if entry.name in present or parse_trace_name(entry.name) is None:
            continue
        if "/" in entry.name or entry.name.startswith("."):
            raise ArchiveError(
                f"archive record names a file outside its directory: {entry.name!r}",
                path=record_path(directory, session_id),
            )
        fetched.append(_fetch(directory, entry) if fetch else directory / entry.name)
    return fetched


def fetch_to_write(path: Path, session_id: str) -> None:
    """For a writer holding ``session_id``'s lock, before it opens ``path``: when the file is
    not on disk and the session's archive record names it (an archive removed it after the
    writer chose it, before the lock was taken), fetch the session's archived files back, so
    the writer continues the file rather than starting an empty one in its place.  One
    ``stat`` when nothing is archived.  Raises ``ArchiveError`` when the file cannot be fetched
    (nothing is created then)."""
    if path.exists():
        return
    record = record_path(path.parent, session_id)
    if not record.exists():
        return
    if any(e.name == path.name for e in read_record(record)):
        fetch_missing(path.parent, session_id, set(os.listdir(path.parent)))


def archived_entry(path: Path) -> ArchivedFile | None:
    """The archive record's entry for the trace file ``path``, or ``None`` when its session's
    record (in the same directory) names no such file.  A host that compared a file's size and
    modification time can compare the entry's instead while the file is away."""
    parsed = parse_trace_name(path.name)
    if parsed is None:
        return None
    try:
        entries = read_record(record_path(path.parent, parsed[0]))
    except ArchiveError:
        return None
    return next((e for e in entries if e.name == path.name), None)


def _fetch(directory: Path, entry: ArchivedFile) -> Path:
    target = directory / entry.name
    temp = directory / f".{entry.name}.{secrets.token_hex(4)}.fetch"
    digest = hashlib.sha256()
    size = 0
    try:
        fs, remote = _filesystem(entry.url, endpoint_url=entry.endpoint_url, storage_options=None)
        with create_private(temp) as out, fs.open(remote, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if (digest.hexdigest(), size) != (entry.sha256, entry.size):
            raise ArchiveError(
                f"{entry.url} does not match its archive record "
                f"(sha256 {digest.hexdigest()[:12]}…, {size} bytes; "
                f"recorded {entry.sha256[:12]}…, {entry.size} bytes)",
                path=target,
                url=entry.url,
            )
        os.utime(temp, ns=(entry.mtime_ns, entry.mtime_ns))
        try:
            os.link(temp, target)
        except FileExistsError:
            pass  # fetched or recreated meanwhile: that file wins
        sync_dir(directory)
    except ArchiveError:
        raise
    except Exception as exc:
        raise ArchiveError(
            f"cannot fetch {entry.url}: {_describe(exc)}", path=target, url=entry.url
        ) from exc
    finally:
        temp.unlink(missing_ok=True)
    return target
