"""Usage rows priced: the estimated cost of the index's usage aggregates.

Owns: summing ``(key, model, requests, counts...)`` rows per key and pricing each model's part
with ``projections.priced_total`` (models without a price: tokens only).  Does not: query the
database (``Index`` does) or hold the price table (the application reads it from config.toml).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eventstore import TokenCounts
    from projections import Price

__all__ = ["priced_groups", "priced_sessions"]


def _counts(*sums: int | None) -> TokenCounts:
    from eventstore import TokenCounts

    a, b, c, t = (v or 0 for v in sums)
    return TokenCounts(cache_read=a, cache_write=b, output=c, total=t)


def priced_groups(rows: list[tuple[Any, ...]], prices: Mapping[str, Price]) -> list[dict[str, Any]]:
    """``(key, model, requests, cache_read, cache_write, output, total)`` rows, in key order,
    as one aggregate per key with its ``cost`` (``None``: no model of the key has a price) and
    ``unpriced_tokens``."""
    from eventstore import TokenCounts
    from projections import priced_total

    groups: dict[Any, list[tuple[Any, ...]]] = {}
    for row in rows:
        groups.setdefault(row[0], []).append(row)
    out: list[dict[str, Any]] = []
    for key, parts in groups.items():
        counts = [(m or "", _counts(a, b, c, t)) for _k, m, _n, a, b, c, t in parts]
        cost, unpriced = priced_total(counts, prices)
        total = sum((tc for _m, tc in counts), TokenCounts())
        out.append(
            {
                "key": key,
                "requests": sum(p[2] or 0 for p in parts),
                "cache_read": total.cache_read,
                "cache_write": total.cache_write,
                "output": total.output,
                "total": total.total,
                "cost": cost,
                "unpriced_tokens": unpriced,
            }
        )
    return out


def priced_sessions(
    rows: list[tuple[Any, ...]], prices: Mapping[str, Price]
) -> dict[str, tuple[float | None, int]]:
    """``(session, model, cache_read, cache_write, output, total)`` rows as each session's
    estimated cost and unpriced tokens."""
    from projections import priced_total

    per: dict[str, list[tuple[str, TokenCounts]]] = {}
    for sid, model, a, b, c, t in rows:
        per.setdefault(sid, []).append((model or "", _counts(a, b, c, t)))
    return {sid: priced_total(models, prices) for sid, models in per.items()}
