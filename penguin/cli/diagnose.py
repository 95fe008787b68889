"""What the reader skipped or cut in a session's files, for the user to see (issue 15 item 4).

Owns: collecting every reader diagnostic of a session — malformed lines, a torn tail, records
whose fields have the wrong type (they decode to ``UnknownPayload`` and every projection skips
them), crash residue — and printing each as one line on stderr.  Does not: repair anything.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, redirect_stderr
from pathlib import Path
from typing import TYPE_CHECKING

from eventstore import (
    HEAD_EVENT_TYPES,
    Diagnostic,
    OmniMessage,
    file_index,
    scan_trace,
    unrecognised,
)

from .terminal.safe import safe

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["quiet_reader", "report", "session_diagnostics", "wrong_type"]


def wrong_type(record: OmniMessage) -> str | None:
    """Why a record was skipped as damage — a known type whose fields do not fit, with no
    ``type``, or in the other envelope — else None, also for a newer writer's type, which is
    kept and is not damage (``eventstore.unrecognised``: every reader's one decision)."""
    found = unrecognised(record)
    return str(found) if found is not None and found.damaged else None


def _residue(path: Path, index: int, kinds: list[str]) -> Diagnostic | None:
    if "session_meta" not in kinds:
        return Diagnostic(path, 1, "empty_file", "holds no session_meta: crash residue, ignored")
    if index > 1 and all(k in ("session_meta", "tool_list_ready") for k in kinds):
        return Diagnostic(path, 1, "empty_file", "holds only its rotation head: crash residue")
    return None


def session_diagnostics(files: Sequence[Path]) -> list[Diagnostic]:
    """Every diagnostic of a session's files (in index order), wrong-typed records included;
    the last file is checked for crash residue (R-ROOT-10)."""
    out: list[Diagnostic] = []
    for position, path in enumerate(files, start=1):
        kinds: list[str] = []
        try:
            items = scan_trace(path)
        except OSError as exc:
            out.append(Diagnostic(path, 0, "malformed", f"cannot read: {exc.strerror or exc}"))
            continue
        for item in items:
            if isinstance(item, Diagnostic):
                out.append(item)
                continue
            line, record = item
            why = wrong_type(record)
            if why is not None:
                out.append(Diagnostic(path, line, "malformed", why))
            elif record.type == "session_meta":
                kinds.append("session_meta")
            else:
                head = isinstance(record.payload, HEAD_EVENT_TYPES)
                kinds.append("tool_list_ready" if head else "other")
        if position == len(files):
            index = file_index(path) or position
            residue = _residue(path, index, kinds)
            if residue is not None:
                out.append(residue)
    return out


def report(err: Console, diagnostics: Sequence[Diagnostic], *, prefix: str = "") -> None:
    """One line per diagnostic on ``err`` (terminal-safe)."""
    from rich.text import Text

    for d in diagnostics:
        where = f"{d.path}:{d.line}" if d.line else str(d.path)
        err.print(
            Text(f"[trace] {prefix}{safe(where, keep_newlines=False)}: {d.kind}: ", style="yellow")
            + Text(safe(d.detail, keep_newlines=False)),
            soft_wrap=True,
        )


@contextmanager
def quiet_reader() -> Iterator[None]:
    """Silence the library reader's own stderr line about malformed lines while the CLI folds
    a session: the CLI prints every diagnostic itself, so each would show twice."""
    with redirect_stderr(io.StringIO()):
        yield
