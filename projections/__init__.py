"""Projections: session state as pure folds over trace records (no I/O).

``ModelContext`` (what the model sees next), ``CarryOver`` (its carry-over part), ``SessionState``
(counters and open spans, with ``GoalState``, the latest goal run) and ``Usage`` (per-request
rows).  Each has ``apply(record)`` and
``from_records(records)``; ``project(records)`` folds all three in one pass (R-PROJ-1a).  The
engine keeps its live state only through these, so live state and rebuilt state are one path.
``FileSummary`` is the fold of one closed file that resume merges instead of re-reading it
(R-TRACE-19).

Names load on first use (PEP 562): ``from projections import markers`` does not load the folds
(issue 18); the public names are listed once, in ``__init__.pyi``,
which mypy and IDEs read and from which the lazy look-up is derived.
"""

from __future__ import annotations

import lazy_loader

# The names live in ``__init__.pyi`` (one list); this derives ``__all__`` and the lazy look-up.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
