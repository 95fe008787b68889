"""How a provider failure becomes an ``LLMOutcome`` (SPEC §2.6, §6): the one classification table.

Owns: the table from HTTP statuses, provider error types and transport exceptions to a StopReason
(and ``permanent``); ``Retry-After`` parsing; the provider's own error text pulled out of an
error body; scrubbing the API key out of every string that leaves an adapter.  Does not: talk to
the network (``_sse``) or decide how the engine retries (the engine's ladder, R-RETRY-1..3).

The table in one sentence: 401 is ``auth``; 403 is ``failed`` (retried, SPEC R-RETRY-1); a
deterministic client error (400, 404, 405, 413, 415, 422) is ``failed`` with ``permanent=True``;
408, 409, 425, 429, every 5xx and 529, connect errors, timeouts and a connection lost mid-stream
are ``timeout``; any other status is ``failed``.  Malformed bodies are classified where they are
parsed (``malformed``), never here.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from typing import Any, Final

import httpx
import msgspec

from engine._protocols import LLMOutcome
from eventstore import StopReason

__all__ = [
    "ERROR_TYPE_STATUS",
    "STATUS_OUTCOMES",
    "TRANSPORT_OUTCOMES",
    "classify_status",
    "error_text",
    "excerpt",
    "http_outcome",
    "redact",
    "retry_after",
    "stream_error_outcome",
    "transport_outcome",
]

REDACTED: Final = "[redacted]"
_EXCERPT: Final = 300
_BODY_TEXT: Final = 2000

# --------------------------------------------------------------------------- the table

STATUS_OUTCOMES: Final[Mapping[int, tuple[StopReason, bool]]] = {
    # status: (outcome, permanent)
    400: ("failed", True),
    401: ("auth", False),
    403: ("failed", False),  # SPEC: retried, reported as failed
    404: ("failed", True),
    405: ("failed", True),
    408: ("timeout", False),
    409: ("timeout", False),
    413: ("failed", True),
    415: ("failed", True),
    422: ("failed", True),
    425: ("timeout", False),
    429: ("timeout", False),
    529: ("timeout", False),  # Anthropic: overloaded
}
"""Statuses with a fixed outcome; every other 5xx is ``timeout``, anything else ``failed``."""

ERROR_TYPE_STATUS: Final[Mapping[str, int]] = {
    # Anthropic's ``error.type`` (an ``event: error`` mid-stream carries no HTTP status): the
    # status the same error has when it comes as a response, so both paths share the table.
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}

TRANSPORT_OUTCOMES: Final[tuple[tuple[type[Exception], StopReason, str], ...]] = (
    # First match wins, so subclasses come before their bases.
    (httpx.ConnectTimeout, "timeout", "connect timeout"),
    (httpx.ReadTimeout, "timeout", "read timeout"),
    (httpx.WriteTimeout, "timeout", "write timeout"),
    (httpx.PoolTimeout, "timeout", "connection pool timeout"),
    (httpx.ConnectError, "timeout", "cannot connect"),
    (httpx.RemoteProtocolError, "timeout", "connection lost"),
    (httpx.ReadError, "timeout", "connection lost"),
    (httpx.WriteError, "timeout", "connection lost"),
    (httpx.CloseError, "timeout", "connection lost"),
    (httpx.ProxyError, "timeout", "proxy error"),
    (httpx.UnsupportedProtocol, "failed", "unsupported protocol"),
    (httpx.TransportError, "timeout", "transport error"),
    (httpx.DecodingError, "malformed", "undecodable response body"),
    (httpx.InvalidURL, "failed", "invalid URL"),
)
"""Exceptions raised by httpx while sending or reading; anything unlisted is ``failed``."""


def classify_status(status: int) -> tuple[StopReason, bool]:
    """The outcome of an HTTP status that is not a success: ``(status, permanent)``."""
    fixed = STATUS_OUTCOMES.get(status)
    if fixed is not None:
        return fixed
    if 500 <= status <= 599:
        return ("timeout", False)
    return ("failed", False)


# --------------------------------------------------------------------------- text helpers


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced (the API key never leaves)."""
    if secret and secret in text:
        return text.replace(secret, REDACTED)
    return text


def excerpt(text: str, limit: int = _EXCERPT) -> str:
    """A one-line, bounded quote of wire data for an error message."""
    flat = text.replace("\r", "\\r").replace("\n", "\\n")
    return flat if len(flat) <= limit else flat[:limit] + "…"


def error_text(body: bytes | str) -> str:
    """The provider's own message in an error body.

    ``{"error": {"message": …}}`` (OpenAI and most compatible servers), Anthropic's
    ``{"type": "error", "error": {"type": …, "message": …}}`` (the type is kept as a prefix),
    ``{"error": "…"}``, ``{"message": …}`` or ``{"detail": …}``; otherwise the body text itself.
    """
    raw = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    stripped = raw.strip()
    try:
        data = msgspec.json.decode(stripped) if stripped[:1] in ("{", "[") else None
    except msgspec.DecodeError:
        data = None
    if isinstance(data, dict):
        found = _message_of(data)
        if found:
            return found
    return excerpt(stripped, _BODY_TEXT)


def _message_of(data: dict[str, Any]) -> str | None:
    error = data.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        kind = error.get("type")
        if isinstance(message, str) and message:
            if data.get("type") == "error" and isinstance(kind, str) and kind:
                return f"{kind}: {message}"
            return message
        if isinstance(kind, str) and kind:
            return kind
    if isinstance(error, str) and error:
        return error
    for key in ("message", "detail"):
        value = data.get(key)
        if isinstance(value, str) and value:
            return value
    return None


# --------------------------------------------------------------------------- outcomes


def retry_after(headers: httpx.Headers, *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (delta seconds or HTTP date)."""
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            ms = float(value)
        except ValueError:
            ms = -1.0
        if ms >= 0:
            return ms / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
        return max(0.0, seconds)
    return seconds if seconds >= 0 else None


def http_outcome(
    provider: str, response: httpx.Response, body: bytes, *, secret: str | None
) -> LLMOutcome:
    """The outcome of a response whose status is not a success."""
    status, permanent = classify_status(response.status_code)
    detail = error_text(body) if body.strip() else response.reason_phrase or "no details"
    message = f"{provider}: HTTP {response.status_code}: {detail}"
    return LLMOutcome(
        status,
        redact(message, secret),
        permanent=permanent,
        retry_after_s=retry_after(response.headers),
    )


def stream_error_outcome(
    provider: str, kind: str | None, message: str | None, *, secret: str | None
) -> LLMOutcome:
    """An error reported inside a stream (``event: error``, an ``{"error": …}`` chunk)."""
    code = ERROR_TYPE_STATUS.get(kind or "")
    if code is None and kind is not None and kind.isdigit():
        code = int(kind)
    status, permanent = classify_status(code) if code is not None else ("failed", False)
    detail = ": ".join(part for part in (kind, message) if part) or "no details"
    return LLMOutcome(
        status, redact(f"{provider}: stream error: {detail}", secret), permanent=permanent
    )


def _first_text(exc: BaseException) -> str:
    """The first non-empty text along the cause chain: httpx often wraps an OS error (say,
    ``Connection reset by peer``) in exceptions with no text of their own."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current).strip()
        if text:
            return text
        current = current.__cause__ or current.__context__
    return ""


def _transport_row(exc: Exception) -> tuple[StopReason, str]:
    for kind, status, label in TRANSPORT_OUTCOMES:
        if isinstance(exc, kind):
            return status, label
    return "failed", type(exc).__name__


def transport_outcome(provider: str, exc: Exception, *, secret: str | None) -> LLMOutcome:
    """The outcome of an exception raised while sending the request or reading the stream."""
    status, label = _transport_row(exc)
    text = _first_text(exc)
    message = f"{provider}: {label}: {text}" if text else f"{provider}: {label}"
    return LLMOutcome(status, redact(message, secret))
