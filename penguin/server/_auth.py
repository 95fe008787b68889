"""Authentication (R-SRV-1).

Owns: the server token (explicit, else ``$PENGUIN_SERVER_TOKEN``, else ``<home>/server-token``
generated at first start with mode 0600), the constant-time check of a bearer token or of a
browser login (its session cookie and key, ``_logins``), and the ``Origin`` check of
cookie-authenticated writes.  Does not: route; keep logins (``_logins``).
"""

from __future__ import annotations

import hmac
import os
import secrets
from typing import Final

from starlette.requests import HTTPConnection

from eventstore import DataRoot

from ._exceptions import ApiError
from ._logins import KEY_HEADER, Logins, cookie_name

__all__ = ["authenticate", "load_token"]

_SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})


def load_token(root: DataRoot, explicit: str | None = None) -> str:
    if explicit:
        return explicit
    env = os.environ.get("PENGUIN_SERVER_TOKEN")
    if env:
        return env
    path = root.home / "server-token"
    try:
        text = path.read_text(encoding="utf-8").strip()
        if text:
            return text
    except FileNotFoundError:
        pass
    token = secrets.token_urlsafe(32)
    # Atomic, 0600 and never through a symlink: a planted link is replaced, not followed.
    root.write_private(path, token.encode() + b"\n")
    return token


def _same(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "replace"), token.encode("utf-8"))


def authenticate(conn: HTTPConnection, token: str, logins: Logins) -> str | None:
    """Raise 401 without a valid token or login, 403 for a cookie write from another origin.
    Returns the login's session id (``None`` for a bearer token)."""
    header = conn.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() == "bearer" and given:
        if _same(given.strip(), token):
            return None
        raise ApiError(401, "unauthorized", "missing or wrong token")
    cookie = conn.cookies.get(cookie_name(conn))
    key = conn.headers.get(KEY_HEADER)
    if not cookie or not key or not logins.check(cookie, key, token):
        raise ApiError(401, "unauthorized", "missing or wrong token")
    if conn.scope.get("method", "GET") not in _SAFE_METHODS:
        origin = conn.headers.get("origin")
        host = conn.headers.get("host")
        scheme_ = conn.url.scheme
        if not origin or not host or origin != f"{scheme_}://{host}":
            raise ApiError(
                403, "bad_origin", "a cookie-authenticated write needs this server's Origin"
            )
    return cookie
