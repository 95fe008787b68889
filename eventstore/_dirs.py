"""Private directories (SPEC R-ROOT-9): the one way the store creates a directory.

Owns: creating a directory and its missing parents as 0700 whatever the umask, optionally making
each new entry durable (R-TRACE-16).  Does not: decide where directories go (``_layout``) or
check that a path is under the data root.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

__all__ = ["make_private_dirs", "sync_dir"]

_DIR_MODE: Final = 0o700
_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY: Final = getattr(os, "O_DIRECTORY", 0)


def make_private_dirs(path: str | os.PathLike[str], *, sync: bool = False) -> Path:
    """Create ``path`` and any missing parents with mode 0700 whatever the umask; each level this
    call creates is ``chmod``-ed after ``mkdir``, levels that already exist (or appear
    concurrently) are left alone.  ``sync`` fsyncs the parent of every new level.  Raises
    ``NotADirectoryError`` when ``path`` ends up not being a directory."""
    target = Path(path)
    missing: list[Path] = []
    probe = target
    # A dangling symlink is no place to create a directory: stop there, the final check fails.
    while not probe.exists() and not probe.is_symlink():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for level in reversed(missing):
        try:
            os.mkdir(level, _DIR_MODE)
        except FileExistsError:
            continue  # created concurrently: not ours to chmod
        os.chmod(level, _DIR_MODE)
        if sync:
            sync_dir(level.parent)
    if not target.is_dir():
        raise NotADirectoryError(f"not a directory: {target}")
    return target


def sync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a new directory entry durable (R-TRACE-16)."""
    fd = os.open(directory, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
