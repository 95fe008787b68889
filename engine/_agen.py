"""The engine's closing of async iterators it consumes.

Owns: ``as_agen``, which lets any async iterator (an LLM's stream, an environment's tool output,
a subagent runner's items) be closed with ``aclosing``, and ``shielded_closing``, which closes
one directly, without a wrapper generator (the per-item hot path of streams and tool outputs).
Does not: know what flows through them.  Streamed segments live in ``eventstore.partials``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from types import TracebackType
from typing import Generic, TypeVar

import anyio

__all__ = ["as_agen", "shielded_closing"]

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
        await _close(iterable)


class shielded_closing(Generic[T]):
    """``async with shielded_closing(it) as items``: iterate ``aiter(it)``; on leaving, close
    ``it`` at once under a shield, as ``aclosing(as_agen(it))`` does, without the wrapper
    generator (one async-generator hop per item fewer)."""

    __slots__ = ("_iterable",)

    def __init__(self, iterable: AsyncIterator[T]) -> None:
        self._iterable = iterable

    async def __aenter__(self) -> AsyncIterator[T]:
        return aiter(self._iterable)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await _close(self._iterable)


async def _close(iterable: object) -> None:
    aclose = getattr(iterable, "aclose", None)
    if aclose is None:
        return
    if getattr(iterable, "ag_frame", True) is None:
        return  # a finished async generator: its cleanup has run, closing it does nothing
    with anyio.CancelScope(shield=True):
        await aclose()
