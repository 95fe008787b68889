"""The append-only trace writer.

Owns: ``TraceWriter`` — one session's lock (R-TRACE-18), torn-tail repair on open (R-TRACE-14),
single-write appends serialized by one lock (R-TRACE-11/12), fail-stop error handling
(R-TRACE-15), the fsync policy (R-TRACE-16), the size limit (R-TRACE-17), rotation (R-TRACE-8..10,
R-ROOT-10) and file/directory permissions (R-ROOT-9).  Does not: decide *when* to rotate or what a
new file's head holds (the engine appends it after ``rotate``), read traces for their content
(``_reader``), or
know the data-root layout beyond "``<session_id>_<NNN>.jsonl`` next to ``<session_id>.lock``".

Every syscall that can fail mid-append (``write``, ``fsync``, ``fdatasync``, ``ftruncate``) is
looked up on the ``os`` module when it is called, so tests can inject faults by monkeypatching
``os`` (the same module object as ``eventstore._writer.os``).
"""

from __future__ import annotations

import errno as _errno
import io
import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Final, Literal, NoReturn, TypeAlias, get_args

from ._codec import decode, encode_line
from ._diagnostics import Diagnostic
from ._dirs import make_private_dirs, sync_dir
from ._exceptions import RecordTooLarge, SessionLocked, TraceDecodeError, TraceWriteError
from ._lock import default_lock_path, open_private, take_lock
from ._names import parse_trace_name, trace_file_name
from ._residue import is_rotation_head
from ._schema import (
    AbortPayload,
    CompactionEndPayload,
    OmniMessage,
    RequestEndPayload,
)
from .archive import fetch_to_write
from .builders import is_recordable

__all__ = ["FsyncPolicy", "TraceWriter"]

FsyncPolicy: TypeAlias = Literal["never", "rotate", "turn", "always"]

_POLICIES: Final = frozenset(get_args(FsyncPolicy))
# Readers treat a longer line as malformed (R-TRACE-17), so the writer must never produce one.
_READER_LINE_LIMIT: Final = 256 * 2**20
# The records after which the "turn" policy makes the file durable (R-TRACE-16).
_TURN_END: Final[frozenset[type]] = frozenset(
    {RequestEndPayload, AbortPayload, CompactionEndPayload}
)
# Payload type -> is_recordable for an origin-free message (filled on first sight).
_RECORDABLE_TYPES: Final[dict[type, bool]] = {}
_FILE_MODE: Final = 0o600
_CHUNK: Final = 1 << 20
_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)


class _NoProgress(OSError):
    """``write`` returned 0: the loop would spin forever (R-TRACE-11)."""


class TraceWriter:
    """Appends records to one session's trace, one whole JSON line per ``os.write``.

    ``path`` is the ``<session_id>_<NNN>.jsonl`` file to append to; it and its parent directories
    are created when missing.  ``session_id`` defaults to the file name minus ``_NNN.jsonl`` and
    ``lock_path`` to ``<dir>/<session_id>.lock``.  A file name without the ``_NNN`` index is
    accepted, but such a writer cannot rotate.  ``rotate`` starts the next file empty: the caller
    appends its head (the engine's ``session_meta`` and ``tool_list_ready``).

    ``append`` is synchronous and safe to call from any thread or task.  After a failed write
    whose partial bytes could not be removed, or after any failed fsync, the writer is *poisoned*:
    every later append raises ``TraceWriteError``.  ``close`` releases the session lock.
    """

    diagnostics: list[Diagnostic]

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: FsyncPolicy = "turn",
        max_record_bytes: int = 64 * 2**20,
        lock_path: Path | None = None,
        session_id: str | None = None,
    ) -> None:
        if fsync not in _POLICIES:
            raise ValueError(f"unknown fsync policy {fsync!r}; expected one of {sorted(_POLICIES)}")
        if not 0 < max_record_bytes <= _READER_LINE_LIMIT:
            raise ValueError(
                f"max_record_bytes must be between 1 and {_READER_LINE_LIMIT} (readers refuse "
                f"longer lines), got {max_record_bytes}"
            )
        path = Path(path)
        parsed = parse_trace_name(path)
        self._stem: str | None = parsed[0] if parsed is not None else None
        self._index = parsed[1] if parsed is not None else 0
        if session_id is None:
            session_id = self._stem if self._stem is not None else path.stem
        self.session_id: Final = session_id
        self.diagnostics = []
        self._fsync: Final = fsync
        self._sync_dirs: Final = fsync != "never"
        self._sync_always: Final = fsync == "always"
        self._sync_turn: Final = fsync == "turn"
        self._max_record_bytes: Final = max_record_bytes
        self._lock = threading.Lock()
        self._path = path
        self._fd = -1
        self._offset = 0
        self._closed = False
        # The failure that poisoned the writer; appends refuse while it is set.
        self._poison: TraceWriteError | None = None
        # One flag for the hot path: closed or poisoned.
        self._blocked = False

        self._lock_path: Final = (
            Path(lock_path) if lock_path is not None else default_lock_path(path, session_id)
        )
        for directory in {path.parent, self._lock_path.parent}:
            try:
                make_private_dirs(directory, sync=self._sync_dirs)
            except OSError as exc:
                raise TraceWriteError(
                    _describe(exc, "cannot create the trace directory"),
                    path=directory,
                    errno=exc.errno,
                ) from exc
        self._lock_fd = self._acquire_lock()
        try:
            # The file was chosen before the lock was taken: an archive may have removed it
            # meanwhile (it holds the lock while it does); never start an empty file over it.
            fetch_to_write(path, session_id)
            self._fd, self._offset = self._open_trace(path, reuse_residue=False)
        except BaseException:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise

    # ------------------------------------------------------------------ properties

    @property
    def path(self) -> Path:
        """The file appends currently go to (changes on rotation)."""
        return self._path

    @property
    def lock_path(self) -> Path:
        return self._lock_path

    @property
    def offset(self) -> int:
        """The current file's size, which is where the next record starts."""
        return self._offset

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def poisoned(self) -> bool:
        return self._poison is not None

    @property
    def fsync_policy(self) -> FsyncPolicy:
        return self._fsync

    # ------------------------------------------------------------------ appending

    def append(self, msg: OmniMessage) -> None:
        """Write ``msg`` as one line (R-TRACE-11), after a pending rotation if there is one.

        Raises ``ValueError`` for a partial or origin-tagged message (R-TRACE-4),
        ``RecordTooLarge`` over the limit (nothing written, writer still usable) and
        ``TraceWriteError`` when the record could not be written (R-TRACE-15): the file then ends
        where it ended before, or the writer is poisoned.
        """
        if msg.origin is not None:
            _refuse(msg)
        # Without an origin, recordability depends on the payload type alone; caching it saves an
        # isinstance against msgspec's metaclass (~0.2 µs) on the hot path.
        ok = _RECORDABLE_TYPES.get(type(msg.payload))
        if ok is None:
            ok = _RECORDABLE_TYPES[type(msg.payload)] = is_recordable(msg)
        if not ok:
            _refuse(msg)
        line = encode_line(msg)
        size = len(line)
        if size > self._max_record_bytes:
            raise RecordTooLarge(size=size, limit=self._max_record_bytes, path=self._path)
        sync = self._sync_always or (self._sync_turn and type(msg.payload) in _TURN_END)
        with self._lock:
            if self._blocked:
                self._raise_blocked()
            # The hot path, inlined: one write, no fstat, the offset tracked by hand.
            fd = self._fd
            start = self._offset
            try:
                written = os.write(fd, line)
                if written != size:
                    _write_rest(fd, line, written, size)
            except OSError as exc:
                self._undo(start, exc, "write failed")
            self._offset = start + size
            if sync:
                self._sync_record(fd, start)

    def _sync_record(self, fd: int, start: int) -> None:
        try:
            _datasync(fd)
        except OSError as exc:
            # The bytes may be in the file but are not durable: the record counts as not
            # written, so take it back if we can (the writer is poisoned either way).
            self._offset = start
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass
            self._fail_sync(exc, "fdatasync failed", start)

    def _undo(self, start: int, exc: OSError, what: str) -> None:
        """Take a failed record back out of the file; poison the writer if that fails too."""
        detail = _describe(exc, what)
        try:
            os.ftruncate(self._fd, start)
        except OSError as trunc_exc:
            err = TraceWriteError(
                f"{detail}; truncating back to offset {start} failed too "
                f"({_describe(trunc_exc, 'ftruncate failed')}), writer poisoned",
                path=self._path,
                errno=exc.errno,
                offset=start,
            )
            self._set_poison(err)
            raise err from exc
        raise TraceWriteError(detail, path=self._path, errno=exc.errno, offset=start) from exc

    def _durable(self, sync: Callable[[], None], path: Path, what: str) -> None:
        try:
            sync()
        except OSError as exc:
            self._fail_sync(exc, what, None, path=path)

    def _fail_sync(
        self, exc: OSError, what: str, offset: int | None, *, path: Path | None = None
    ) -> NoReturn:
        err = TraceWriteError(
            f"{_describe(exc, what)}, writer poisoned",
            path=self._path if path is None else path,
            errno=exc.errno,
            offset=offset,
        )
        self._set_poison(err)
        raise err from exc

    def _set_poison(self, err: TraceWriteError) -> None:
        self._poison = err
        self._blocked = True

    def _raise_blocked(self) -> None:
        if self._closed:
            raise TraceWriteError("writer is closed", path=self._path, offset=self._offset)
        poison = self._poison
        assert poison is not None
        raise TraceWriteError(
            f"writer is poisoned by an earlier failure: {poison.detail}",
            path=poison.path,
            errno=poison.errno,
            offset=poison.offset,
        ) from poison

    # ------------------------------------------------------------------ rotation

    def rotate(self) -> Path:
        """Switch to the next ``_NNN`` file (R-TRACE-8), empty, and return its path."""
        with self._lock:
            if self._blocked:
                self._raise_blocked()
            self._rotate_locked()
            return self._path

    def _rotate_locked(self) -> None:
        if self._stem is None:
            raise ValueError(f"cannot rotate {self._path}: its name has no _NNN index")
        new_index = self._index + 1
        new_path = self._path.with_name(trace_file_name(self._stem, new_index))
        # Open the target before giving up the current file, so a refused target leaves the
        # writer appending where it was.
        new_fd, new_offset = self._open_trace(new_path, reuse_residue=True)
        old = (self._fd, self._offset, self._path, self._index)
        if self._fsync != "never":
            try:
                os.fsync(old[0])
            except OSError as exc:
                os.close(new_fd)
                self._fail_sync(exc, "fsync of the rotated-out file failed", self._offset)
        self._fd, self._offset, self._path, self._index = new_fd, new_offset, new_path, new_index
        os.close(old[0])

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Make the file durable per policy, close it and release the session lock.  Idempotent.

        Raises ``TraceWriteError`` if the final fsync fails (everything is closed regardless).
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._blocked = True
            failure: OSError | None = None
            try:
                if self._fsync != "never" and self._poison is None:
                    try:
                        os.fsync(self._fd)
                    except OSError as exc:
                        failure = exc
            finally:
                os.close(self._fd)
                # Closing the only descriptor of the lock file releases the flock.
                os.close(self._lock_fd)
                self._lock_fd = -1
            if failure is not None:
                err = TraceWriteError(
                    _describe(failure, "fsync on close failed"),
                    path=self._path,
                    errno=failure.errno,
                    offset=self._offset,
                )
                self._poison = err
                raise err from failure

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "poisoned" if self._poison else "open"
        return f"<TraceWriter {self._path} {state} offset={self._offset}>"

    # ------------------------------------------------------------------ opening

    def _acquire_lock(self) -> int:
        path = self._lock_path
        try:
            return take_lock(path, session_id=self.session_id, sync=self._sync_dirs)
        except SessionLocked:
            raise
        except OSError as exc:
            if isinstance(exc, TraceWriteError):
                raise
            raise TraceWriteError(
                _describe(exc, "cannot take the session lock"), path=path, errno=exc.errno
            ) from exc

    def _open_trace(self, path: Path, *, reuse_residue: bool) -> tuple[int, int]:
        """Open ``path`` for appending; return the descriptor and the file's size.

        Repairs a torn tail (R-TRACE-14).  With ``reuse_residue`` (a rotation target) an existing
        file must be crash residue (R-ROOT-10), which is emptied; anything else is refused.
        """
        try:
            fd, created = open_private(path, os.O_WRONLY | os.O_APPEND)
        except OSError as exc:
            raise TraceWriteError(
                _describe(exc, "cannot open the trace file"), path=path, errno=exc.errno
            ) from exc
        try:
            if created:
                if self._sync_dirs:
                    parent = path.parent
                    self._durable(lambda: sync_dir(parent), path, "fsync of the directory failed")
                return fd, 0
            size = os.fstat(fd).st_size
            if reuse_residue:
                if size and not _is_residue(path, size):
                    raise TraceWriteError(
                        "rotation target already holds records of another context",
                        path=path,
                        errno=_errno.EEXIST,
                    )
                if size:
                    os.ftruncate(fd, 0)
                    if self._sync_dirs:
                        self._durable(lambda: os.fsync(fd), path, "fsync of emptied residue failed")
                return fd, 0
            if size:
                size = self._repair_tail(fd, path, size)
            return fd, size
        except OSError as exc:
            os.close(fd)
            if isinstance(exc, TraceWriteError):
                raise
            raise TraceWriteError(
                _describe(exc, "cannot prepare the trace file"), path=path, errno=exc.errno
            ) from exc
        except BaseException:
            os.close(fd)
            raise

    def _repair_tail(self, fd: int, path: Path, size: int) -> int:
        """Cut a fragment after the last newline (R-TRACE-14); return the new size."""
        with open(path, "rb", buffering=0) as f:
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return size
            end = _last_newline_end(f, size)
            lines = _count_newlines(f, end)
        os.ftruncate(fd, end)
        if self._sync_dirs:
            self._durable(lambda: os.fsync(fd), path, "fsync after the repair failed")
        self.diagnostics.append(
            Diagnostic(
                path,
                lines + 1,
                "torn_tail_repaired",
                f"truncated {size - end} byte(s) at offset {end}",
            )
        )
        return end


# ---------------------------------------------------------------------- helpers


def _refuse(msg: OmniMessage) -> NoReturn:
    raise ValueError(
        "partial and origin-tagged messages are not recorded (R-TRACE-4): "
        f"{type(msg.payload).__name__}, origin={msg.origin!r}"
    )


def _write_rest(fd: int, line: bytes | bytearray, done: int, size: int) -> None:
    """Continue a short write until the record is complete (R-TRACE-11)."""
    if done <= 0:
        raise _NoProgress(f"write made no progress after 0 of {size} bytes")
    view = memoryview(line)
    try:
        while done < size:
            written = os.write(fd, view[done:])
            if written <= 0:
                raise _NoProgress(f"write made no progress after {done} of {size} bytes")
            done += written
    finally:
        view.release()


def _datasync(fd: int) -> None:
    sync = getattr(os, "fdatasync", None)
    if sync is None:  # pragma: no cover - platforms without fdatasync (macOS)
        os.fsync(fd)
    else:
        sync(fd)


def _describe(exc: OSError, what: str) -> str:
    if isinstance(exc, _NoProgress):
        return str(exc)
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{what}: {reason}"


def _last_newline_end(f: io.FileIO, size: int) -> int:
    """Offset just after the file's last ``\\n`` (0 when there is none)."""
    pos = size
    while pos > 0:
        start = max(0, pos - _CHUNK)
        f.seek(start)
        chunk = f.read(pos - start)
        idx = chunk.rfind(b"\n")
        if idx >= 0:
            return start + idx + 1
        pos = start
    return 0


def _count_newlines(f: io.FileIO, end: int) -> int:
    f.seek(0)
    count = 0
    remaining = end
    while remaining > 0:
        chunk = f.read(min(_CHUNK, remaining))
        if not chunk:
            break
        count += chunk.count(b"\n")
        remaining -= len(chunk)
    return count


def _is_residue(path: Path, size: int) -> bool:
    """Crash residue per R-ROOT-10: no complete line, or complete lines that are only a rotation
    head (``session_meta``, ``tool_list_ready``) — copies of earlier records, safe to drop."""
    if size > 2 * _READER_LINE_LIMIT:
        return False
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    for raw in complete.split(b"\n"):
        if not raw.strip():
            continue
        try:
            msg = decode(raw)
        except TraceDecodeError:
            return False
        if not is_rotation_head(msg):
            return False
    return True
