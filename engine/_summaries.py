"""The summary of a file closed by rotation (SPEC R-TRACE-19).

Owns: folding the file the session just rotated out of into its ``FileSummary`` and storing it
in the session's sidecar, best effort.  Does not: define the summary (``projections``), the
sidecar format (``eventstore``), or use summaries (resume merges them).
"""

from __future__ import annotations

from pathlib import Path

from eventstore import SummaryCache, iter_trace
from projections import FileSummary, summarize_file

__all__ = ["store_file_summary"]


def store_file_summary(closed: Path) -> bool:
    """Store ``closed``'s summary in the sidecar; ``False`` when it could not be (a cache: the
    next resume builds it from the file instead)."""
    cache = SummaryCache.beside(closed, FileSummary)
    fingerprint = cache.fingerprint(closed)
    if fingerprint is None:
        return False
    try:
        summary = summarize_file(iter_trace(closed, report=False))
    except OSError:
        return False
    cache.put(closed, summary, fingerprint=fingerprint)
    return cache.save()
