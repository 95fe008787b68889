"""Browser logins (R-SRV-1, issue 29).

Owns: the server-side login sessions of the Web App: a random session id per login (the
``HttpOnly; SameSite=Strict`` cookie, named per server: ``penguin_session_<port>``) paired with a
random key the page keeps in its origin's storage and sends as ``X-Penguin-Key``; both expire,
a logout revokes them, and they are bound to the token they were granted under, so a token
change revokes every login.  The logins survive a server restart (issue 35: an open page
reconnects by itself): only their digests and expiry are kept, handed to a ``save`` callback
(the host writes them 0600 under the data root); none of them can be turned back into a
cookie or key.  Does not: check bearer tokens or origins (``_auth``); do file I/O.

Why a key besides the cookie: browsers send cookies to every port of a host, so any other web
app on ``127.0.0.1:<any port>`` receives this server's cookie.  The key lives in the page's
``localStorage``, which is per origin (port included), so what another app receives is never
enough to authenticate.  The master token itself never goes into a cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from starlette.requests import HTTPConnection

__all__ = ["KEY_HEADER", "LOGIN_TTL_S", "Login", "Logins", "cookie_name"]

KEY_HEADER: Final = "x-penguin-key"
LOGIN_TTL_S: Final = 12 * 3600.0
MAX_LOGINS: Final = 1024


def cookie_name(conn: HTTPConnection) -> str:
    """The login cookie of the server that received ``conn`` (its port in the name, so two
    servers on one host never overwrite each other's cookie)."""
    server = conn.scope.get("server")
    port = server[1] if server and server[1] is not None else None
    if port is None:
        port = conn.url.port or (443 if conn.url.scheme == "https" else 80)
    return f"penguin_session_{port}"


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True, slots=True)
class Login:
    """What a login returns once: the cookie value, the header key, the expiry (epoch s)."""

    session: str
    key: str
    expires: float


@dataclass(frozen=True, slots=True)
class _Entry:
    key: bytes
    token: bytes
    expires: float


class Logins:
    """The live logins, by digest of their session id (the ids themselves are never kept)."""

    def __init__(
        self,
        *,
        ttl: float = LOGIN_TTL_S,
        limit: int = MAX_LOGINS,
        clock: Callable[[], float] = time.time,
        saved: bytes | None = None,
        save: Callable[[bytes], object] | None = None,
    ) -> None:
        """``saved``: what an earlier ``save`` got (the logins of the last run; unreadable
        content raises ``ValueError``); ``save(data)`` is called after every change."""
        self.ttl = ttl
        self._limit = limit
        self._clock = clock
        self._save = save
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        if saved:
            self._load(saved)

    def _load(self, data: bytes) -> None:
        try:
            rows = json.loads(data)["logins"]
            now = self._clock()
            for session, key, token, expires in rows:
                if float(expires) > now:
                    entry = _Entry(bytes.fromhex(key), bytes.fromhex(token), float(expires))
                    self._entries[bytes.fromhex(session)] = entry
        except (ValueError, KeyError, TypeError) as exc:
            self._entries.clear()
            raise ValueError(f"unreadable saved logins: {exc}") from None

    def dump(self) -> bytes:
        """The digests and expiry of the live logins (what ``save`` gets)."""
        rows = [[d.hex(), e.key.hex(), e.token.hex(), e.expires] for d, e in self._entries.items()]
        return json.dumps({"version": 1, "logins": rows}).encode()

    def _changed(self) -> None:
        if self._save is not None:
            self._save(self.dump())

    def __len__(self) -> int:
        return len(self._entries)

    def create(self, token: str) -> Login:
        now = self._clock()
        self._purge(now)
        while len(self._entries) >= self._limit:
            self._entries.popitem(last=False)  # the oldest login goes first
        session, key = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        expires = now + self.ttl
        self._entries[_digest(session)] = _Entry(_digest(key), _digest(token), expires)
        self._changed()
        return Login(session, key, expires)

    def check(self, session: str, key: str, token: str) -> bool:
        """Whether ``session`` + ``key`` is a live login granted under ``token``."""
        entry = self._entries.get(_digest(session))
        if entry is None:
            return False
        if entry.expires <= self._clock() or not hmac.compare_digest(entry.token, _digest(token)):
            del self._entries[_digest(session)]
            self._changed()
            return False
        return hmac.compare_digest(entry.key, _digest(key))

    def revoke(self, session: str) -> bool:
        gone = self._entries.pop(_digest(session), None) is not None
        if gone:
            self._changed()
        return gone

    def revoke_all(self) -> None:
        self._entries.clear()
        self._changed()

    def _purge(self, now: float) -> None:
        for digest in [d for d, e in self._entries.items() if e.expires <= now]:
            del self._entries[digest]
