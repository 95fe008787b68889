"""Estimated cost of token counts from a price table (the Web App's and the usage API's figures).

Owns: ``Price`` (US dollars per million tokens: uncached input, cached input, output), finding a
model's price in a table (an exact name, else the longest matching ``*`` pattern), and the
estimate itself.  Does not: read the table from a file (the user's ``config.toml`` is read by
the application), fold records (callers sum ``TokenCounts`` per model first), or guess: a model
without a price has no cost (``None``), never zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Final

from eventstore import TokenCounts

__all__ = ["DEFAULT_PRICES", "Price", "estimate_cost", "price_for", "priced_total"]

_MILLION: Final = 1_000_000


@dataclass(frozen=True, slots=True)
class Price:
    """US dollars per million tokens.  ``cached_input`` defaults to ``input`` (a provider that
    does not discount cache reads)."""

    input: float
    output: float
    cached_input: float | None = None

    def __post_init__(self) -> None:
        for name in ("input", "output", "cached_input"):
            value = getattr(self, name)
            if value is not None and (value != value or value < 0 or value == float("inf")):
                raise ValueError(f"{name} must be a finite price >= 0, not {value!r}")


# A starting table (list prices, USD per million tokens, late 2026); the user's ``[prices]``
# tables in config.toml override and extend it.  Patterns match the dated model ids.
DEFAULT_PRICES: Final[Mapping[str, Price]] = {
    "gpt-4o": Price(2.50, 10.00, 1.25),
    "gpt-4o-2024-*": Price(2.50, 10.00, 1.25),
    "gpt-4o-mini*": Price(0.15, 0.60, 0.075),
    "gpt-4.1": Price(2.00, 8.00, 0.50),
    "gpt-4.1-2025-*": Price(2.00, 8.00, 0.50),
    "gpt-4.1-mini*": Price(0.40, 1.60, 0.10),
    "gpt-4.1-nano*": Price(0.10, 0.40, 0.025),
    "claude-sonnet-4*": Price(3.00, 15.00, 0.30),
    "claude-3-7-sonnet*": Price(3.00, 15.00, 0.30),
    "claude-3-5-haiku*": Price(0.80, 4.00, 0.08),
    "claude-opus-4*": Price(15.00, 75.00, 1.50),
}


def price_for(model: str, table: Mapping[str, Price]) -> Price | None:
    """``model``'s price: an exact key, else the longest key with ``*``/``?`` matching it (so
    ``gpt-4o-mini*`` wins over ``gpt-4o*`` for ``gpt-4o-mini-2024-07-18``); ``None`` if none."""
    exact = table.get(model)
    if exact is not None:
        return exact
    best: tuple[int, Price] | None = None
    for pattern, price in table.items():
        wild = "*" in pattern or "?" in pattern
        if wild and fnmatchcase(model, pattern) and (best is None or len(pattern) > best[0]):
            best = (len(pattern), price)
    return None if best is None else best[1]


def estimate_cost(counts: TokenCounts, price: Price | None) -> float | None:
    """Dollars for ``counts`` (cached input, uncached input, output) at ``price``; ``None``
    without a price."""
    if price is None:
        return None
    cached = price.input if price.cached_input is None else price.cached_input
    return (
        counts.cache_read * cached + counts.cache_write * price.input + counts.output * price.output
    ) / _MILLION


def priced_total(
    per_model: Iterable[tuple[str, TokenCounts]], table: Mapping[str, Price]
) -> tuple[float | None, int]:
    """The cost of several models' counts: the sum over the priced models (``None`` when no
    model is priced) and the tokens of the models without a price (shown as tokens only)."""
    cost: float | None = None
    unpriced = 0
    for model, counts in per_model:
        value = estimate_cost(counts, price_for(model, table))
        if value is None:
            unpriced += counts.total
        else:
            cost = value if cost is None else cost + value
    return cost, unpriced
