"""Serving the Web App's files (R-WEB-5).

Owns: the static directory, the security headers on every file (a strict CSP with no inline
script, ``nosniff``, no referrer, no framing) and the SPA fallback (``/`` serves
``index.html``).  Does not: authenticate (the page's files are public; every ``/api`` call
is guarded by the server).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CSP", "STATIC_DIR", "web_app"]

STATIC_DIR: Final = Path(__file__).with_name("static")

# Every asset is served from this origin; images may also be pasted data:/blob: previews.
CSP: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
_HEADERS: Final = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-cache"),
]


class _Secured:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in _HEADERS}
                headers = [h for h in message.get("headers", []) if h[0].lower() not in names]
                message = {**message, "headers": headers + _HEADERS}
            await send(message)

        await self.app(scope, receive, send_secured)


def web_app() -> ASGIApp:
    """The ASGI app serving the static files (``html=True``: ``/`` is ``index.html``)."""
    return _Secured(StaticFiles(directory=STATIC_DIR, html=True))
