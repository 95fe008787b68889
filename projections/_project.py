"""Owns: folding the three projections in one pass over records (R-PROJ-1a).  Does not: keep
anything between calls."""

from __future__ import annotations

from collections.abc import Iterable

from eventstore import OmniMessage

from ._context import ModelContext
from ._state import SessionState
from ._usage import Usage


def project(records: Iterable[OmniMessage]) -> tuple[ModelContext, SessionState, Usage]:
    """Fold ``ModelContext``, ``SessionState`` and ``Usage`` over ``records`` in one pass."""
    ctx, state, usage = ModelContext(), SessionState(), Usage()
    for record in records:
        ctx.apply(record)
        state.apply(record)
        usage.apply(record)
    return ctx, state, usage
