"""Following traces written by other processes (R-SRV-13: rows within 2 s).

Owns: the ``watchfiles`` loop over the data root that catches the index up after changes to
``.jsonl`` files, and has the host stream what another process appended to a session it
hosts but does not hold (issue 29: a CLI run shows live in the Web App).  Does not: fold
(``Index.refresh``), read records (``SessionHost.catch_up``).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Final

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


# How old the index may grow without a change seen: inotify can miss one (a queue overflow),
# and while the watcher is armed readers no longer check the traces themselves (R-SRV-13: 2 s).
SAFETY_REFRESH_S: Final = 2.0


async def watch_traces(ctx: ServerContext) -> None:
    ctx.root.ensure_dir(ctx.root.home)
    # The watcher's thread notices a cancellation only between waits and shutdown waits for it:
    # a short rust_timeout keeps SIGTERM at ~0.5 s instead of watchfiles' default 5 s.  While
    # tasks run the traces change all the time: one refresh a second is enough, and each one
    # checks the root.  ``yield_on_timeout``: an empty batch every rust_timeout when nothing
    # changed, so the loop learns the watcher is armed and can refresh now and then anyway.
    try:
        async for changes in awatch(
            ctx.root.home,
            watch_filter=_is_trace,
            debounce=1000,
            step=50,
            rust_timeout=500,
            yield_on_timeout=True,
        ):
            if not ctx.watching:
                # Armed (watchfiles starts watching before its first batch): one refresh covers
                # what changed between the start's refresh and now; the watcher sees the rest.
                await _refresh(ctx)
                ctx.watching = True
            elif not changes:
                if time.monotonic() - ctx.refreshed >= SAFETY_REFRESH_S:
                    await _refresh(ctx)
                continue
            sids = {sid for _, path in changes if (sid := _session_of(path)) is not None}
            for sid in sorted(sids):
                try:
                    await ctx.host.catch_up(sid)
                except Exception:
                    log.exception("streaming the new records of %s failed", sid)
            await _refresh(ctx)
            await anyio.lowlevel.checkpoint()
    finally:
        ctx.watching = False  # readers check the traces themselves again


async def _refresh(ctx: ServerContext) -> None:
    try:
        await ctx.refresh_index(max_age=0)
    except Exception:
        log.exception("index refresh failed")


def _session_of(path: str) -> str | None:
    """``<session_id>_<NNN>.jsonl`` -> the session id."""
    name = os.path.basename(path)
    stem, _, ext = name.rpartition(".")
    sid, sep, index = stem.rpartition("_")
    if ext != "jsonl" or not sep or not index.isdigit():
        return None
    return sid
