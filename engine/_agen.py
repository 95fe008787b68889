"""The one async-generator wrapper of the engine.

Owns: ``as_agen``, which lets any async iterator (an LLM's stream, an environment's tool output,
a subagent runner's items) be closed with ``aclosing``.  Does not: know what flows through it.
Streamed segments live in ``eventstore.partials``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import TypeVar

import anyio

__all__ = ["as_agen"]

T = TypeVar("T")


async def as_agen(iterable: AsyncIterator[T]) -> AsyncGenerator[T, None]:
    """Wrap ``iterable`` in an async generator, so ``aclosing`` can always close it, whatever the
    implementation returned.  Closing the wrapper closes the wrapped iterator at once, under a
    shield (its cleanup — an HTTP response, a child process — must neither wait for the garbage
    collector nor be skipped by a cancellation)."""
    try:
        async for item in iterable:
            yield item
    finally:
        aclose = getattr(iterable, "aclose", None)
        if aclose is not None:
            with anyio.CancelScope(shield=True):
                await aclose()
