"""Words for what happened to a request, as a reader names it (issue 15 item 18, issue 30).

Owns: the label of a failed or retried request — ``server error 500``, ``rate limited (429)``,
``HTTP 401``, ``connection refused``, ``cannot connect``, ``connection lost`` — read from its
recorded ``error_message``, because the recorded status groups them by what the engine does
next (an HTTP 500 and a refused connection are both recorded ``timeout``: both are retried).
Used by every surface that shows a request's end: the CLI's views, ``export_trace``.  Does not:
change what is recorded.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["request_label"]

_HTTP: Final = re.compile(r"\bHTTP (\d{3})\b")
# Transport failures as the providers word them (engine.llm's TRANSPORT_OUTCOMES), most
# specific first: the label for the first one the message contains.
_TRANSPORT: Final = (
    ("connection refused", "connection refused"),
    ("cannot connect", "cannot connect"),
    ("connection lost", "connection lost"),
    ("connect timeout", "connect timeout"),
    ("read timeout", "read timeout"),
    ("idle timeout", "timeout"),
)


def request_label(status: str, error_message: str | None) -> str:
    """What happened, in a reader's words; the recorded ``status`` when the message says no
    more."""
    message = error_message or ""
    m = _HTTP.search(message)
    if m is not None:
        code = int(m.group(1))
        if 500 <= code <= 599:
            return f"server error {code}"
        if code == 429:
            return "rate limited (429)"
        return f"HTTP {code}"
    lowered = message.lower()
    for needle, label in _TRANSPORT:
        if needle in lowered:
            return label
    return status
