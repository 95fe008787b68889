"""Deprecated alias of ``eventstore.partials`` (kept for one release; see the README changelog)."""

from __future__ import annotations

import warnings

from .partials import PartialAggregator

__all__ = ["PartialAggregator"]

warnings.warn(
    "eventstore.aggregate is deprecated; import PartialAggregator from eventstore.partials",
    DeprecationWarning,
    stacklevel=2,
)
