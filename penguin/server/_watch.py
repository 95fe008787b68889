"""Following traces written by other processes (R-SRV-13: rows within 2 s).

Owns: the ``watchfiles`` loop over the data root that catches the index up after changes to
``.jsonl`` files.  Does not: fold (``Index.refresh``).
"""

from __future__ import annotations

import logging
import os

import anyio
from watchfiles import Change, awatch

from ._context import ServerContext

__all__ = ["watch_traces"]

log = logging.getLogger("penguin.server")


def _is_trace(change: Change, path: str) -> bool:
    """A trace file changed, or a directory appeared.  inotify watches a new directory only once
    its creation is seen, so a process that creates a session's directories and writes its whole
    trace at once can leave no event for the trace itself (about 1 in 10 here); the refresh a new
    directory triggers walks the root and finds the file, and later writes are seen."""
    return path.endswith(".jsonl") or (change == Change.added and os.path.isdir(path))


async def watch_traces(ctx: ServerContext) -> None:
    ctx.root.ensure_dir(ctx.root.home)
    # The watcher's thread notices a cancellation only between waits and shutdown waits for it:
    # a short rust_timeout keeps SIGTERM at ~0.5 s instead of watchfiles' default 5 s.  While
    # tasks run the traces change all the time: one refresh a second is enough (a reader's
    # route refreshes on demand too), and each one walks the root.
    async for _changes in awatch(
        ctx.root.home, watch_filter=_is_trace, debounce=1000, step=50, rust_timeout=500
    ):
        try:
            await ctx.refresh_index(max_age=0)
        except Exception:
            log.exception("index refresh failed")
        await anyio.lowlevel.checkpoint()
