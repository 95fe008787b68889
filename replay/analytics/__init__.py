"""Fleet analytics: SQL over many sessions' traces with DuckDB (the ``analytics`` extra).

``open_fleet(home=...)`` or ``open_fleet(traces="glob")`` reads the JSONL traces with DuckDB's
JSON reader against an explicit schema -- no Python loop over records -- and creates the views
``sessions``, ``records``, ``requests``, ``tool_calls``, ``usage`` and ``diagnostics``
(``VIEWS``).  ``requests`` and ``usage`` fold the records exactly as the ``Usage`` projection
does; damaged lines are rows of ``diagnostics``, never an error.  ``Fleet.report(name)`` runs a
named report (``REPORTS``); ``open_fleet(home=..., cache=True)`` reads the views from the data
root's incrementally refreshed Parquet cache (``_cache``); ``Fleet.export_parquet(dir)`` writes the views as Parquet
partitioned by day.  DuckDB is imported on first use: importing this module is cheap and works
without it (``AnalyticsUnavailable`` then says how to install it).
"""

from __future__ import annotations

from ._cache import CacheInfo
from ._exceptions import INSTALL_HINT, AnalyticsError, AnalyticsUnavailable
from ._fleet import Fleet, Result, open_fleet
from ._reports import REPORTS
from ._views import VIEWS

__all__ = [
    "INSTALL_HINT",
    "REPORTS",
    "VIEWS",
    "AnalyticsError",
    "AnalyticsUnavailable",
    "CacheInfo",
    "Fleet",
    "Result",
    "open_fleet",
]
