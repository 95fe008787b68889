"""The session lock (R-TRACE-18): ``<traces>/<date>/<session_id>.lock``.

Owns: taking the lock for a writer (``take_lock``), asking whether a writer holds it without
taking it (``probe_lock``), the holder's pid written in the file, and the lock file's name beside
a session's trace files (``lock_path_of``).  Does not: write records (``_writer``) or find
sessions (``_layout``).

A writer holds an exclusive ``flock`` on the lock file for as long as it is open; the pid it
writes into the file is only for messages.  Whether a session is being written is therefore
asked of the lock, never of the pid: a pid outlives the writer that wrote it (a closed writer in
a process that goes on, a recycled pid), so "the pid is alive" reads ``running`` after the
writer closed.

``flock`` has no query that takes nothing, so the probe takes a shared lock without blocking
and releases it at once: held exclusively means a writer has the session open.  A writer that
starts in that very instant gets ``SessionLocked`` as if the session were busy (its caller
reports it; nothing is lost).  The lock belongs to the open file description, so a writer of
this very process is seen like another process's.
"""

from __future__ import annotations

import errno
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ._dirs import sync_dir
from ._exceptions import SessionLocked
from ._names import parse_trace_name

__all__ = ["LockProbe", "lock_path_of", "probe_lock", "take_lock"]

_FILE_MODE: Final = 0o600
_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_SUFFIX: Final = ".lock"


@dataclass(frozen=True, slots=True)
class LockProbe:
    """What ``probe_lock`` found: whether a writer holds the session lock and, when it does,
    the pid it wrote (``None`` when unreadable)."""

    path: Path
    held: bool
    holder_pid: int | None = None


def lock_path_of(trace_file: str | os.PathLike[str]) -> Path:
    """The lock file beside a trace file ``<dir>/<session_id>_<NNN>.jsonl``:
    ``<dir>/<session_id>.lock``.  ``ValueError`` for a name that is not a trace file's."""
    path = Path(trace_file)
    parsed = parse_trace_name(path)
    if parsed is None:
        raise ValueError(f"{path}: not a trace file name (<session_id>_<NNN>.jsonl)")
    return path.with_name(parsed[0] + _SUFFIX)


def default_lock_path(trace_file: Path, session_id: str) -> Path:
    """``<dir>/<session_id>.lock`` for a writer of ``trace_file`` (any name)."""
    return trace_file.parent / f"{session_id}{_SUFFIX}"


def probe_lock(path: str | os.PathLike[str]) -> LockProbe:
    """Whether a writer holds the session lock at ``path`` (R-TRACE-18), asked of the lock itself.

    A missing lock file is not held (no writer ever opened the session there).  Never creates,
    writes or follows anything: a symlink at ``path`` raises ``ValueError`` (R-ROOT-9; no writer
    takes a lock through one).  Other ``OSError`` s (permissions) propagate."""
    lock = Path(path)
    try:
        fd = os.open(lock, os.O_RDONLY | _CLOEXEC | _NOFOLLOW)
    except FileNotFoundError:
        return LockProbe(lock, held=False)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError(f"refusing a symlinked session lock file: {lock}") from None
        raise
    try:
        held = _held(fd)
        return LockProbe(lock, held=held, holder_pid=read_pid(fd) if held else None)
    finally:
        os.close(fd)


def _held(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def take_lock(path: Path, *, session_id: str, sync: bool) -> int:
    """Take the session lock at ``path`` for a writer: the lock file is created 0600 if missing
    (never through a symlink), locked without blocking, and the pid written into it.  Returns
    the descriptor; closing it releases the lock.  Raises ``SessionLocked`` when a writer holds
    it and ``OSError`` when the file cannot be opened or locked."""
    fd, created = open_private(path, os.O_RDWR)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SessionLocked(session_id=session_id, holder_pid=read_pid(fd), path=path) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        if created and sync:
            sync_dir(path.parent)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_private(path: Path, flags: int) -> tuple[int, bool]:
    """Open (creating 0600 if missing, whatever the umask: R-ROOT-9); say whether it was created.

    A symlink is never followed (R-ROOT-9): a planted ``<session>.lock`` or trace link pointing
    outside the data root must not be truncated or written through.
    """
    flags |= _CLOEXEC | _NOFOLLOW
    while True:
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, _FILE_MODE)
        except FileExistsError:
            pass
        else:
            try:
                os.fchmod(fd, _FILE_MODE)
            except BaseException:
                os.close(fd)
                raise
            return fd, True
        try:
            return os.open(path, flags), False
        except FileNotFoundError:
            continue  # removed between the two opens: try to create it again


def read_pid(fd: int) -> int | None:
    """The pid a writer wrote into the lock file (its first line), or ``None``."""
    try:
        text = os.pread(fd, 64, 0)
    except OSError:
        return None
    try:
        # The pid is the first line (a holder that wrote without truncating leaves debris).
        pid = int(text.split(b"\n", 1)[0].strip() or b"x")
    except ValueError:
        return None
    return pid if pid > 0 else None
