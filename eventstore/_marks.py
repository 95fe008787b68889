"""Writing a host's mark on a session that no run holds: ``session_archived``.

Owns: ``mark_archived`` — appending one ``session_archived`` record to the session's latest
trace file through a ``TraceWriter``, so the session's lock is held while it is written (a
session another process has open raises ``SessionLocked`` and nothing is written) and the
record is durable when it returns.  Does not: decide whether the session may be marked (a host
refuses a session it is running itself), read the mark back (``projections.is_archived``, the
index's ``archived`` column), or touch ``eventstore.archive`` (moving closed files to object
storage is another meaning of "archive").
"""

from __future__ import annotations

from pathlib import Path

from ._layout import DataRoot
from ._writer import TraceWriter
from .builders import session_archived

__all__ = ["mark_archived"]

# A rotation between finding the latest file and taking the lock moves the latest file on;
# each retry follows it.  More than this means another writer keeps rotating: it holds the lock.
_ATTEMPTS = 3


def mark_archived(
    root: DataRoot,
    session_id: str,
    *,
    archived: bool = True,
    project: str | None = None,
    agent: str | None = None,
) -> Path:
    """Append ``{"type": "session_archived", "archived": archived}`` to the session's latest
    trace file (not crash residue, R-ROOT-10) while holding its lock; returns that file.

    ``SessionLocked`` while another writer holds the session (its run may be writing);
    ``FileNotFoundError`` for an unknown session; ``TraceWriteError`` when the record could not
    be made durable.  The record is not model context and is outside every run (SPEC §23: what
    must survive a restart is a record; the index only projects it)."""
    loc = root.locate(session_id, project=project, agent=agent)
    latest = root.latest_trace(session_id, project=loc.project, agent=loc.agent)
    for _ in range(_ATTEMPTS):
        # "always": the one record is on disk before the caller reports success.
        writer = TraceWriter(latest, fsync="always", session_id=session_id)
        try:
            now = root.latest_trace(session_id, project=loc.project, agent=loc.agent)
            if now == latest:
                writer.append(session_archived(archived))
                break
        finally:
            writer.close()
        latest = now
    else:
        raise RuntimeError(f"{latest}: the session's latest file kept changing")
    return latest
