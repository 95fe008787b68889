"""The per-line verdict for lines the SQL fast path cannot settle alone.

Owns: deciding, exactly as the tolerant reader does (``eventstore.decode``, then a retry on the
trimmed line), whether one line is a record, and giving DuckDB the record in canonical JSON
(duplicate keys resolved, last one wins) or the reason it is malformed.  Does not: split files
into lines, apply the torn-tail rule or the size limit (``_views`` does, in SQL).

DuckDB's JSON parser accepts a few things ``msgspec`` refuses (``NaN``/``Infinity`` literals,
numbers out of range, nesting deeper than Python's recursion limit) and reads duplicate keys
first-wins.  The SQL sends only lines that might be such a case (rare) here, one call per line;
every ordinary line is decided in SQL.
"""

from __future__ import annotations

from eventstore import TraceDecodeError, decode, encode

__all__ = ["line_verdict"]


def line_verdict(line: str | None) -> str:
    """``"+"`` and the record's canonical JSON when ``line`` decodes, else ``"-"`` and why."""
    if line is None:
        return "-not JSON: invalid UTF-8"
    try:
        return "+" + encode(decode(line)).decode()
    except Exception as exc:
        first = exc
    stripped = line.strip(" \t\r\n\v\f")
    if stripped != line:
        try:
            return "+" + encode(decode(stripped)).decode()
        except Exception as exc:
            first = exc
    if isinstance(first, TraceDecodeError):
        return "-" + first.detail
    return f"-decoder error: {first}"
