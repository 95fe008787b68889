"""Private files (SPEC R-ROOT-9): the one way to write a file only its owner may read.

Owns: ``write_private`` (replace a file's content atomically: a new private file renamed over
the name) and ``create_private`` (a new file, created exclusively).  Both give mode 0600
whatever the umask, create missing parent directories 0700, and never write through a symlink:
one at the name is replaced (``write_private``) or refused (``create_private``), never followed
to its target.  Does not: decide where files go, or check that a path is under a data root
(``DataRoot.write_private`` does).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import BinaryIO, Final

from ._dirs import make_private_dirs, sync_dir

__all__ = ["create_private", "write_private"]

_FILE_MODE: Final = 0o600
_EXCLUSIVE: Final = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def create_private(path: str | os.PathLike[str]) -> BinaryIO:
    """A new file at ``path``, open for writing (binary, buffered; close it, e.g. ``with``).

    Created exclusively: ``FileExistsError`` when the name exists — a symlink there, even a
    dangling one, included, so nothing is ever written through a planted link.  Mode 0600
    whatever the umask; missing parents are created 0700."""
    target = Path(path)
    make_private_dirs(target.parent)
    fd = os.open(target, _EXCLUSIVE, _FILE_MODE)
    try:
        os.fchmod(fd, _FILE_MODE)  # whatever the umask
        return open(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def write_private(path: str | os.PathLike[str], data: bytes, *, sync: bool = False) -> Path:
    """Replace the file ``path`` with ``data``: mode 0600 whatever the umask, parents created
    0700.  Written to a new private file beside it and renamed over the name, so a reader sees
    the old content or the new, never a part, and a symlink at ``path`` (even a dangling one) is
    replaced by the file, never followed.  ``sync`` makes the content and the new name durable
    (fsync of the file, then of the directory).  Returns ``path``."""
    target = Path(path)
    parent = make_private_dirs(target.parent)
    while True:
        temp = parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(temp, _EXCLUSIVE, _FILE_MODE)
        except FileExistsError:
            continue
        break
    try:
        try:
            os.fchmod(fd, _FILE_MODE)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if sync:
        sync_dir(parent)
    return target
