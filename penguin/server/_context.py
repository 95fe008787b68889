"""What every route handler reaches: the host, the index, the user channel, the limits.

Owns: ``ServerContext`` and the helpers shared by the route modules (JSON responses, the
error response, the session row).  Does not: route.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import Response

from eventstore import DataRoot, OmniMessage, encode, lock_path_of, probe_lock
from penguin._index import Index
from projections import DEFAULT_PRICES, Price

from ._channel import Channel
from ._host import SessionHost
from ._hosted import Hosted
from ._logins import Logins

__all__ = ["ServerContext", "as_json", "ctx_of", "error_response", "json_response"]

_json = msgspec.json.Encoder()
DEFAULT_BODY_LIMIT: Final = 64 * 2**20


def as_json(msg: OmniMessage) -> Any:
    """A message as the trace spells it, as a JSON value."""
    return msgspec.json.decode(encode(msg))


def json_response(data: Any, status: int = 200) -> Response:
    return Response(_json.encode(data), status, media_type="application/json")


def error_response(status: int, code: str, message: str) -> Response:
    return json_response({"error": {"code": code, "message": message}}, status)


@dataclass
class ServerContext:
    root: DataRoot
    host: SessionHost
    index: Index
    token: str
    body_limit: int = DEFAULT_BODY_LIMIT
    body_timeout: float = 30.0
    events: Channel = field(default_factory=lambda: Channel((0, 0), restored=False))
    refreshed: float = 0.0
    # The host's write count when the last refresh began, and whether the watcher is armed
    # (``watch_traces``): then a reader's refresh is needed only after this server wrote.
    refreshed_writes: int = -1
    watching: bool = False
    refresh_lock: anyio.Lock = field(default_factory=anyio.Lock)
    loop: asyncio.AbstractEventLoop | None = None
    logins: Logins = field(default_factory=Logins)
    # USD per million tokens by model (``config.toml``'s [prices] over the built-in table).
    prices: Mapping[str, Price] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    # Sessions a session_created event was sent for, or that existed at start (R-SET-6: once
    # per session, and for sessions another process created, which the index finds).
    announced: set[str] = field(default_factory=set)

    def begin_shutdown(self) -> None:
        """SIGTERM (R-SRV-14): refuse new tasks, abort running ones, end every stream."""
        self.host.begin_shutdown(then=self.events.close)

    async def refresh_index(self, *, max_age: float = 0.5) -> None:
        """Catch the index up before a read (``max_age=0``: now, after a write of the route's
        own).  While the watcher is armed it folds every change to the traces, other processes'
        included, within about a second: a reader then refreshes only when this server's own
        sessions wrote since the last refresh (read your writes).  Otherwise the check is one
        ``stat`` per session (linear in the fleet) and a search would pay it."""
        if time.monotonic() - self.refreshed < max_age:
            return
        if max_age > 0 and self.watching and self.host.writes.count == self.refreshed_writes:
            return
        async with self.refresh_lock:
            if time.monotonic() - self.refreshed < max_age:
                return
            writes = self.host.writes.count  # before: a write during the refresh counts later
            changed = await anyio.to_thread.run_sync(self.index.refresh)
            self.refreshed, self.refreshed_writes = time.monotonic(), writes
            for sid in changed:
                if sid not in self.announced and self.index.session_row(sid) is not None:
                    self.session_created_event(sid, "cli")

    def known_at_start(self) -> None:
        """The sessions the index holds when the server starts: created before it, announced
        to nobody (a client lists them)."""
        self.announced.update(row["id"] for row in self.index.session_rows())

    def row(self, h: Hosted | None, indexed: dict[str, Any] | None) -> dict[str, Any]:
        base: dict[str, Any] = dict(indexed or {})
        if h is not None:
            base.setdefault("id", h.id)
            base.setdefault("project", h.project)
            base.setdefault("agent", h.agent)
            session = h.session
            activity = None if h.state == "idle" else h.state
            if session is not None:
                st = session.state
                base.update(
                    turns=st.turns_total,
                    last_status=st.last_request_status,
                    records=st.records,
                    # R-SET-5: this process holds the session's lock.
                    status=st.status_given(locked=True, activity=activity),
                )
                # The conversation header: where it works and with which model (a session
                # not written yet has no index row to say so).
                meta = session.meta.payload
                base.setdefault("workspace", getattr(meta, "workspace", None))
                base.setdefault("model", getattr(meta, "model_id", None))
            elif activity is not None:
                base["status"] = activity
            base["state"] = h.state
            base["title"] = h.title
            if session is not None or not base.get("approval"):
                # A session not loaded yet runs with its recorded mode (the index's).
                base["approval"] = h.approval
            live = None if session is None else session.sandbox
            base["sandbox"] = h.sandbox if live is None else live.settings()
            if h.subagents is not None:
                base["subagents"] = h.subagents
            base["last_active"] = base.get("last_active") or _iso(h.last_active)
        else:
            base.update(state="idle", title=None)
        if base.get("status") == "interrupted" and (h is None or h.session is None):
            # A run left open: running while another process holds the lock (R-SET-5).
            base["status"] = "running" if self._held(base) else "interrupted"
        base.setdefault("created", None)
        base.setdefault("files", 0)
        base.setdefault("turns", 0)
        base.setdefault("last_status", None)
        base.setdefault("status", "idle")
        base.setdefault("approval", None)
        base.setdefault("archived", False)
        return base

    def _held(self, row: dict[str, Any]) -> bool:
        try:
            files = self.root.trace_files(
                row["id"], project=row.get("project"), agent=row.get("agent")
            )
            return bool(files) and probe_lock(lock_path_of(files[-1])).held
        except (OSError, ValueError, LookupError):
            return False

    def session_state_event(self, h: Hosted) -> None:
        self.events.publish_server(
            {
                "type": "session_state",
                "id": h.id,
                "state": h.state,
                "status": self.row(h, None)["status"],  # the one status (R-SET-5)
                "last_active": _iso(h.last_active),
            }
        )

    def session_created_event(self, sid: str, source: str) -> None:
        if sid in self.announced:
            return
        self.announced.add(sid)
        self.events.publish_server({"type": "session_created", "id": sid, "source": source})


def _iso(t: float) -> str:
    """UTC with its offset, so it orders with the traces' own times (the sessions list sorts
    by last activity)."""
    import datetime as _dt

    return _dt.datetime.fromtimestamp(t, _dt.UTC).isoformat(timespec="milliseconds")


def ctx_of(request: Request) -> ServerContext:
    ctx: ServerContext = request.app.state.penguin
    return ctx
