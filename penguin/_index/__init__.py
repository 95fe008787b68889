"""The session index: one SQLite database per data root, shared by the CLI and the server.

``<home>/index.sqlite3`` is a projection of the traces — session rows (the one status,
R-SET-5), usage and error rows, and an FTS5 full-text index of the user and assistant texts,
tool calls and (capped) tool outputs — caught up by byte offsets.  Deleting it and refreshing
gives the same rows.

Modules: ``_schema`` — the tables and opening a connection; ``_checkpoint`` — a file's
checkpoint; ``_records`` — caps and wrong-typed records; ``_fold`` — what each record adds;
``_catchup`` — incremental catch-up and file faults; ``_search`` — full-text queries;
``_index`` — ``Index``, the facade.
"""

from __future__ import annotations

from ._index import SESSION_COLUMNS, Index, IndexedSession
from ._records import OUTPUT_CHARS, wrong_type
from ._search import Hit, QuerySyntaxError, Segment, parse_since

__all__ = [
    "OUTPUT_CHARS",
    "SESSION_COLUMNS",
    "Hit",
    "Index",
    "IndexedSession",
    "QuerySyntaxError",
    "Segment",
    "parse_since",
    "wrong_type",
]
