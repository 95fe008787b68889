"""The file-summary sidecar ``<session_id>.summaries`` (SPEC R-TRACE-19).

Owns: the sidecar file beside a session's traces — reading its entries, checking each one
against the trace file it names, and rewriting it atomically (0600, never through a symlink).
Does not: know what a summary holds (the projections define it; here it is any msgspec type),
fold records, or decide when a file is closed (the engine writes at rotation, resume builds
what is missing).

It is a cache, never a source of truth: an entry whose file changed, a line that does not
decode, an entry written for another summary schema, or a sidecar that cannot be read are all
simply "no entry", and a sidecar that cannot be written is left as it was.  Entries carry the
schema of their summary type, so a summary that gains a field (a new projection) never reads an
old entry as its own.

How "the file changed" is decided (issue 18): size and a hash of the last 4 KiB alone miss an
edit in the middle that keeps the length (a digit of a token count, a flipped byte), and hashing
every closed file on every resume would make resume grow with history again.  So an entry
records the file's ``stat`` identity — size, ``mtime_ns``, ``ctime_ns``, inode and device — the
hash of its last 4 KiB, a hash of its whole content and when the ``stat`` was taken:

* stat identity unchanged and the tail hash equal: the entry is trusted (an ``fstat`` and a
  4 KiB read per file: flat resume).  Any write through the file system moves ``ctime``, which
  no ``touch`` or ``utime`` can put back, so an edit with its mtime restored is still seen.
* stat identity changed (``touch``, a copy restored over the file, the data root moved to
  another disk): the whole content is hashed; equal, the summary is used and the entry
  re-stamped (no rebuild), otherwise it is rebuilt.
* an entry stamped less than ``_RACY_NS`` after the file's last change ("racily clean", as git
  calls it): file timestamps come from a coarse clock (a kernel tick, or whole seconds on some
  file systems), so a write in that same tick would leave ``ctime`` as recorded.  Such an entry
  is verified by content until it is re-stamped once the window has passed — by a resume that
  stores, or by ``save`` (the next rotation), which checks those entries whose window passed.

Not detected cheaply (documented in the README): a same-length change that leaves size, both
times, inode and device as recorded — a write to the block device under the file system, a
file system that does not maintain ``ctime``, or a clock set back (or, on a network file
system, a server clock behind ours by more than the window) — unless it falls in the last
4 KiB.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import time
from pathlib import Path
from typing import Final, Generic, TypeVar

import msgspec

__all__ = ["SummaryCache", "sidecar_path"]

T = TypeVar("T")

_TAIL_BYTES: Final = 4096
_CHUNK: Final = 2**20
# Coarser than any file-system timestamp granularity we know (FAT: 2 s) plus a kernel tick.
_RACY_NS: Final = 3 * 10**9
_MAX_SIDECAR_BYTES: Final = 64 * 2**20
_TRACE_NAME: Final = re.compile(r"^(.+)_(\d{3,})\.jsonl\Z")
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)


class Fingerprint(msgspec.Struct, frozen=True):
    """What an entry knows of its file: ``stat`` identity, tail and content hashes, and when
    (wall clock, ns) the ``stat`` was taken."""

    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    dev: int
    tail: str
    digest: str
    stamp_ns: int

    def same_stat(self, st: os.stat_result) -> bool:
        return (self.size, self.mtime_ns, self.ctime_ns, self.ino, self.dev) == (
            st.st_size,
            st.st_mtime_ns,
            st.st_ctime_ns,
            st.st_ino,
            st.st_dev,
        )

    @property
    def racy(self) -> bool:
        """Stamped so soon after the file's last change that a write in the same timestamp
        tick would not show in its times (also when a time is ahead of our clock)."""
        return self.stamp_ns - max(self.mtime_ns, self.ctime_ns) < _RACY_NS


class _Entry(msgspec.Struct, frozen=True):
    file: str
    fp: Fingerprint
    schema: str
    summary: msgspec.Raw


def sidecar_path(trace: Path) -> Path:
    """``<dir>/<session_id>.summaries`` for a trace file ``<dir>/<session_id>_<NNN>.jsonl``."""
    match = _TRACE_NAME.match(trace.name)
    if match is None:
        raise ValueError(f"{trace}: not a trace file name (<session_id>_<NNN>.jsonl)")
    return trace.with_name(f"{match.group(1)}.summaries")


def _now_ns() -> int:
    return time.time_ns()


def _open(path: Path) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    except OSError:
        return None


def _tail_hash(fd: int, size: int) -> str:
    start = max(0, size - _TAIL_BYTES)
    return hashlib.blake2b(os.pread(fd, size - start, start), digest_size=16).hexdigest()


def _content_digest(fd: int, size: int) -> str:
    """blake2b of the first ``size`` bytes of ``fd`` (the size its ``fstat`` gave)."""
    h = hashlib.blake2b(digest_size=16)
    offset = 0
    while offset < size:
        chunk = os.pread(fd, min(_CHUNK, size - offset), offset)
        if not chunk:
            break
        h.update(chunk)
        offset += len(chunk)
    return h.hexdigest()


def _stamped(fd: int, st: os.stat_result, stamp: int, digest: str | None = None) -> Fingerprint:
    size = st.st_size
    return Fingerprint(
        size,
        st.st_mtime_ns,
        st.st_ctime_ns,
        st.st_ino,
        st.st_dev,
        _tail_hash(fd, size),
        digest if digest is not None else _content_digest(fd, size),
        stamp,
    )


def _fingerprint(path: Path) -> Fingerprint | None:
    """``path``'s fingerprint as it is now, or ``None`` when it cannot be read."""
    fd = _open(path)
    if fd is None:
        return None
    try:
        st = os.fstat(fd)
        return _stamped(fd, st, _now_ns())  # stamped before the content is read
    except OSError:
        return None
    finally:
        os.close(fd)


def _verify(path: Path, fp: Fingerprint) -> tuple[bool, Fingerprint | None]:
    """Whether ``path`` still holds the content ``fp`` was taken of, and the fingerprint to
    record now when the recorded one should be re-stamped (``None`` when it is fine as it
    is).  Hashes the whole file only when its stat identity moved or ``fp`` is racy."""
    fd = _open(path)
    if fd is None:
        return False, None
    try:
        st = os.fstat(fd)
        stamp = _now_ns()
        if fp.same_stat(st) and not fp.racy:
            return _tail_hash(fd, st.st_size) == fp.tail, None
        if st.st_size != fp.size or _content_digest(fd, st.st_size) != fp.digest:
            return False, None
        now = _stamped(fd, st, stamp, fp.digest)
        # Re-stamped when that settles it, or records a new stat identity (a touch, a copy).
        return True, (now if not now.racy or not fp.same_stat(st) else None)
    except OSError:
        return False, None
    finally:
        os.close(fd)


_SCHEMAS: dict[type[object], str] = {}


def _schema_of(kind: type[object]) -> str:
    """A digest of ``kind``'s JSON schema (computed once per type: it takes milliseconds)."""
    known = _SCHEMAS.get(kind)
    if known is not None:
        return known
    schema = msgspec.json.encode(msgspec.json.schema(kind))
    digest = _SCHEMAS[kind] = hashlib.blake2b(schema, digest_size=8).hexdigest()
    return digest


class SummaryCache(Generic[T]):
    """The entries of one session's sidecar, typed as ``kind``.

    ``get(trace)`` returns the summary stored for that file when the file still has the content
    it had when the summary was made (see the module docstring for how that is decided
    cheaply); ``put`` stages a new one; ``save`` rewrites the sidecar (only when something was
    put or re-stamped) and never raises for an I/O error: a cache that cannot be written costs
    the next reader a rebuild, nothing else.
    """

    def __init__(self, path: Path, kind: type[T]) -> None:
        self.path = path
        self._kind = kind
        self._schema = _schema_of(kind)
        self._entries: dict[str, _Entry] = {}
        self._dirty = False
        self._load()

    @classmethod
    def beside(cls, trace: Path, kind: type[T]) -> SummaryCache[T]:
        """The cache of the session that ``trace`` belongs to."""
        return cls(sidecar_path(trace), kind)

    def _load(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
        except OSError:
            return
        try:
            with os.fdopen(fd, "rb") as f:
                data = f.read(_MAX_SIDECAR_BYTES)
        except OSError:
            return
        decoder = msgspec.json.Decoder(_Entry)
        for line in data.splitlines():
            try:
                entry = decoder.decode(line)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue  # garbage or a torn line: that entry is rebuilt
            if entry.schema == self._schema:
                self._entries[entry.file] = entry

    def get(self, trace: Path) -> T | None:
        entry = self._entries.get(trace.name)
        if entry is None:
            return None
        same, restamped = _verify(trace, entry.fp)
        if not same:
            return None  # the file changed under its summary
        try:
            summary = msgspec.json.decode(entry.summary, type=self._kind)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        if restamped is not None and restamped != entry.fp:
            # Verified by content: kept, so that the next reader trusts the stat again.
            self._entries[trace.name] = msgspec.structs.replace(entry, fp=restamped)
            self._dirty = True
        return summary

    def put(self, trace: Path, summary: T, *, fingerprint: Fingerprint | None = None) -> None:
        """Stage ``summary`` for ``trace`` as the file is now (or as ``fingerprint`` says it
        was when the summary was folded: taken before the read, a file that grows during the
        read gets an entry that no longer matches, never a wrong one)."""
        fp = fingerprint if fingerprint is not None else _fingerprint(trace)
        if fp is None:
            return
        raw = msgspec.Raw(msgspec.json.encode(summary))
        self._entries[trace.name] = _Entry(trace.name, fp, self._schema, raw)
        self._dirty = True

    @staticmethod
    def fingerprint(trace: Path) -> Fingerprint | None:
        """Take it before folding ``trace``, and pass it to ``put``."""
        return _fingerprint(trace)

    def _settle(self) -> None:
        """Re-stamp the racy entries whose window has passed and whose file (verified by
        content) did not change, so that no reader has to hash them again: at rotation this
        settles the files closed by earlier rotations."""
        now = _now_ns()
        for name, entry in list(self._entries.items()):
            fp = entry.fp
            if not fp.racy or now - max(fp.mtime_ns, fp.ctime_ns) < _RACY_NS:
                continue
            same, restamped = _verify(self.path.with_name(name), fp)
            if same and restamped is not None and not restamped.racy:
                self._entries[name] = msgspec.structs.replace(entry, fp=restamped)

    def save(self) -> bool:
        """Rewrite the sidecar atomically if anything was put; ``False`` when it could not be
        written (left as it was)."""
        if not self._dirty:
            return True
        self._settle()
        encoder = msgspec.json.Encoder()
        data = b"".join(encoder.encode(e) + b"\n" for e in self._entries.values())
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
        except OSError:
            return False
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), 0o600)
                f.write(data)
            os.replace(tmp, self.path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False
        self._dirty = False
        return True
