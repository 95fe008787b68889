"""The file-summary sidecar ``<session_id>.summaries`` (SPEC R-TRACE-19).

Owns: the sidecar file beside a session's traces — reading its entries, checking each one
against the trace file it names (size and a hash of the file's last 4 KiB), and rewriting it
atomically (0600, never through a symlink).  Does not: know what a summary holds (the
projections define it; here it is any msgspec type), fold records, or decide when a file is
closed (the engine writes at rotation, resume builds what is missing).

It is a cache, never a source of truth: an entry whose file changed, a line that does not
decode, an entry written for another summary schema, or a sidecar that cannot be read are all
simply "no entry", and a sidecar that cannot be written is left as it was.  Entries carry the
schema of their summary type, so a summary that gains a field (a new projection) never reads an
old entry as its own.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from pathlib import Path
from typing import Final, Generic, TypeVar

import msgspec

__all__ = ["SummaryCache", "sidecar_path"]

T = TypeVar("T")

_TAIL_BYTES: Final = 4096
_MAX_SIDECAR_BYTES: Final = 64 * 2**20
_TRACE_NAME: Final = re.compile(r"^(.+)_(\d{3,})\.jsonl\Z")
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)


class _Entry(msgspec.Struct, frozen=True):
    file: str
    size: int
    tail: str
    schema: str
    summary: msgspec.Raw


def sidecar_path(trace: Path) -> Path:
    """``<dir>/<session_id>.summaries`` for a trace file ``<dir>/<session_id>_<NNN>.jsonl``."""
    match = _TRACE_NAME.match(trace.name)
    if match is None:
        raise ValueError(f"{trace}: not a trace file name (<session_id>_<NNN>.jsonl)")
    return trace.with_name(f"{match.group(1)}.summaries")


def _fingerprint(path: Path) -> tuple[int, str] | None:
    """``(size, blake2b of the last 4 KiB)`` of ``path``, or ``None`` when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - _TAIL_BYTES)
        tail = os.pread(fd, size - start, start)
    except OSError:
        return None
    finally:
        os.close(fd)
    return size, hashlib.blake2b(tail, digest_size=16).hexdigest()


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

    ``get(trace)`` returns the summary stored for that file when the file still has the size
    and tail it had when the summary was made; ``put`` stages a new one; ``save`` rewrites the
    sidecar (only when something was put) and never raises for an I/O error: a cache that
    cannot be written costs the next reader a rebuild, nothing else.
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
        if _fingerprint(trace) != (entry.size, entry.tail):
            return None  # the file changed under its summary
        try:
            return msgspec.json.decode(entry.summary, type=self._kind)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None

    def put(self, trace: Path, summary: T, *, fingerprint: tuple[int, str] | None = None) -> None:
        """Stage ``summary`` for ``trace`` as the file is now (or as ``fingerprint`` says it
        was when the summary was folded: taken before the read, a file that grows during the
        read gets an entry that no longer matches, never a wrong one)."""
        fp = fingerprint if fingerprint is not None else _fingerprint(trace)
        if fp is None:
            return
        raw = msgspec.Raw(msgspec.json.encode(summary))
        self._entries[trace.name] = _Entry(trace.name, fp[0], fp[1], self._schema, raw)
        self._dirty = True

    @staticmethod
    def fingerprint(trace: Path) -> tuple[int, str] | None:
        return _fingerprint(trace)

    def save(self) -> bool:
        """Rewrite the sidecar atomically if anything was put; ``False`` when it could not be
        written (left as it was)."""
        if not self._dirty:
            return True
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
