"""AbortSignal: a thread-safe, loop-independent interrupt flag (API.md).

Owns: the flag, its reason, and waking whoever waits for it in any event loop or thread.  Does
not: cancel anything itself; the engine wires it to cancel scopes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import anyio
import anyio.lowlevel

__all__ = ["AbortSignal", "make_waker"]


class AbortSignal:
    """Fire with ``abort()`` from any thread or task; observe with ``aborted`` or ``await wait()``.

    ``reason`` is for the host only: traces always record ``aborted by user`` (R-CARRY-9).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._aborted = False
        self._reason: str | None = None
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._next_key = 0

    def __repr__(self) -> str:
        return f"AbortSignal(aborted={self._aborted}, reason={self._reason!r})"

    @property
    def aborted(self) -> bool:
        return self._aborted

    @property
    def reason(self) -> str | None:
        return self._reason

    def abort(self, reason: str | None = None) -> None:
        """Fire the signal.  Idempotent: the first reason wins."""
        with self._lock:
            if self._aborted:
                return
            self._aborted = True
            self._reason = reason
            callbacks = list(self._callbacks.values())
            self._callbacks.clear()
        for callback in callbacks:
            callback()

    def add_callback(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` once when the signal fires (at once if it already has).

        The callback runs in the thread that calls ``abort()``.  Returns a function that
        unregisters it.
        """
        with self._lock:
            if not self._aborted:
                key = self._next_key
                self._next_key += 1
                self._callbacks[key] = callback
                return lambda: self._remove(key)
        callback()
        return lambda: None

    def _remove(self, key: int) -> None:
        with self._lock:
            self._callbacks.pop(key, None)

    def wake_on_abort(self, event: anyio.Event) -> Callable[[], None]:
        """Set ``event`` when the signal fires (at once if it has), from whatever thread fires
        it; returns a callable that forgets the request."""
        return self.add_callback(make_waker(event))

    async def wait(self) -> None:
        """Return once the signal has fired."""
        if self._aborted:
            return
        event = anyio.Event()
        remove = self.wake_on_abort(event)
        try:
            await event.wait()
        finally:
            remove()


def make_waker(event: anyio.Event) -> Callable[[], None]:
    """A callable that sets ``event`` from any thread, without blocking the caller."""
    native = anyio.lowlevel.current_token().native_token
    loop_thread = threading.get_ident()

    def wake() -> None:
        if threading.get_ident() == loop_thread:
            event.set()
            return
        try:
            if isinstance(native, asyncio.AbstractEventLoop):
                native.call_soon_threadsafe(event.set)
            else:  # trio: a TrioToken
                native.run_sync_soon(event.set)  # type: ignore[attr-defined]
        except RuntimeError:
            pass  # the loop has closed: nobody is waiting any more

    return wake
