"""Trace files as the CLI finds them on the command line.

Owns: telling a trace file from anything else (``sniff_trace``), finding the ``*.jsonl`` files
under a directory without leaving it through a link (R-ROOT-9), grouping files into sessions as
the validator does, and their total size.  Does not: read records beyond the first lines of a
file, or resolve a session argument (``targets``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

# Cheap names only (eventstore loads a name's module on first use): `--help` needs no codec.
from eventstore import parse_trace_name

from .errors import CliError
from .terminal.safe import safe

__all__ = ["find_trace_files", "group_sessions", "sniff_trace", "total_bytes", "trace_name"]


trace_name = parse_trace_name  # the one spelling lives in eventstore (R-ROOT-4)


def sniff_trace(path: Path) -> None:
    """Raise ``CliError`` (exit 2) unless ``path`` looks like a trace file
    (``eventstore.not_a_trace``)."""
    from eventstore import not_a_trace

    shown = safe(str(path), keep_newlines=False)
    try:
        why = not_a_trace(path)
    except IsADirectoryError:
        raise CliError(f"{shown}: is a directory") from None
    except PermissionError:
        raise CliError(f"{shown}: permission denied") from None
    if why is not None:
        raise CliError(f"{shown}: {why}")


def find_trace_files(directory: Path) -> list[Path]:
    """Every ``*.jsonl`` file under ``directory``, sorted, by the store's one symlink rule
    (``eventstore.find_trace_files``, R-ROOT-9): a link resolving outside ``directory`` is left
    out with a warning on stderr."""
    from eventstore import find_trace_files as find

    return find(directory)


def group_sessions(files: Iterable[Path]) -> dict[tuple[Path, str] | Path, list[Path]]:
    """Files grouped into sessions as the validator groups them: by the id in the name within
    one ``traces`` directory (the parent of the date directories)."""
    groups: dict[tuple[Path, str] | Path, list[Path]] = {}
    for q in files:
        info = trace_name(q)
        key: tuple[Path, str] | Path = (q.resolve().parent.parent, info[0]) if info else q
        groups.setdefault(key, []).append(q)
    return groups


def total_bytes(files: Sequence[Path]) -> int:
    size = 0
    for f in files:
        try:
            size += f.stat().st_size
        except OSError:
            continue
    return size
