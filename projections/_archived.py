"""Whether a session is archived: the fold of its ``session_archived`` marks.

Owns: ``archived_after`` (one record) and ``is_archived`` (a session's records): the last own
``session_archived`` record wins; a session without one is not archived.  Does not: write the
mark (``eventstore.mark_archived``), or let it touch the session's state, status or context —
those projections skip it (``eventstore.HOST_EVENT_TYPES``), so R-SET-5's status stays the
last run's.
"""

from __future__ import annotations

from collections.abc import Iterable

from eventstore import OmniMessage, SessionArchivedPayload

__all__ = ["archived_after", "is_archived"]


def archived_after(archived: bool, record: OmniMessage) -> bool:
    """The flag after one more record.  An origin-tagged record is a child's (R-PROJ-4): a
    subagent's mark is its own session's, not its parent's."""
    p = record.payload
    if type(p) is SessionArchivedPayload and record.origin is None:
        return p.archived
    return archived


def is_archived(records: Iterable[OmniMessage]) -> bool:
    """Whether the last own ``session_archived`` record of ``records`` says archived."""
    archived = False
    for record in records:
        archived = archived_after(archived, record)
    return archived
