"""Owns: the store's one rule for symlinks met while finding trace files (R-ROOT-9), and the
search of a directory for trace files (``find_trace_files``).  Does not: know the layout of a
data root (``DataRoot`` walks it with this same rule).

The rule: a symlink — to a file or to a directory — is followed when it resolves inside the
base of the search (the data root, or the directory searched); one that resolves outside is
never followed.  A lookup (one session's files) then raises ``ValueError``; a listing or a
search leaves that one entry out with an ``OutsideRootWarning``, so that one bad link hides one
entry, not the whole listing.  Only symlinks are resolved: a plain entry of a directory already
checked is inside.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

__all__ = ["OutsideCheck", "OutsideRootWarning", "find_trace_files"]


class OutsideRootWarning(UserWarning):
    """A listing left out an entry whose symlink resolves outside the data root (R-ROOT-9)."""


class OutsideCheck:
    """Whether a symlinked path resolves under ``base``: raise (a lookup), or warn and skip it
    (``skip``: a listing or a search)."""

    def __init__(self, base: Path, *, skip: bool, what: str = "the data root") -> None:
        self._base = base
        self._skip = skip
        self._what = what

    def __call__(self, path: Path) -> bool:
        resolved = path.resolve()
        if resolved == self._base or resolved.is_relative_to(self._base):
            return True
        message = f"path resolves outside {self._what} {self._base}: {path} -> {resolved}"
        if not self._skip:
            raise ValueError(message)
        warnings.warn(f"skipped {path}: {message}", OutsideRootWarning, stacklevel=4)
        return False


def find_trace_files(directory: str | os.PathLike[str]) -> list[Path]:
    """Every ``*.jsonl`` file under ``directory``, sorted, with the store's symlink rule: a
    symlinked file or directory is followed when it resolves inside ``directory`` and left out
    with an ``OutsideRootWarning`` otherwise.  A file or directory reached by several paths
    (through a link) is listed once, under the first of them in sorted order."""
    top = Path(directory)
    check = OutsideCheck(top.resolve(), skip=True, what="the directory searched")
    seen_dirs: set[Path] = set()
    seen_files: set[Path] = set()
    found: list[Path] = []

    def walk(parent: Path) -> None:
        real = parent.resolve()
        if real in seen_dirs:
            return  # a link back to a directory already searched
        seen_dirs.add(real)
        try:
            entries = sorted(os.scandir(parent), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return
        for entry in entries:
            path = Path(entry.path)
            if entry.is_symlink() and not check(path):
                continue
            if entry.is_dir():
                walk(path)
            elif entry.name.endswith(".jsonl") and entry.is_file():
                # A plain entry of a resolved directory needs no resolving of its own.
                target = path.resolve() if entry.is_symlink() else real / entry.name
                if target not in seen_files:
                    seen_files.add(target)
                    found.append(path)

    walk(top)
    return sorted(found)
