"""The request statuses a reconnect may retry (R-RETRY-1).

Owns: ``RETRYABLE_STATUSES``, the one copy the engine's retry loop and the validator share.
Does not: retry.  A module of its own so that the validator (``penguin validate``) does not load
the session options and pydantic for one constant (issue 18: CLI start-up).
"""

from __future__ import annotations

from typing import Final

__all__ = ["RETRYABLE_STATUSES"]

RETRYABLE_STATUSES: Final = frozenset({"failed", "timeout", "malformed"})
"""R-RETRY-1: the request statuses a reconnect may retry (``aborted`` and ``auth`` never are)."""
