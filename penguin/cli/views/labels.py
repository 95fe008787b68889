"""Words for what happened, as a user reads them (issue 15 item 18).

Owns: the label of a failed or retried request (``server error 503``, ``rate limited``,
``connection refused`` instead of the recorded status alone — the trace keeps its status) and
of a tool call's end (``denied`` rather than the ``aborted`` stop reason a denial records).
Does not: change what is recorded.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["request_label", "tool_end_label"]

_HTTP: Final = re.compile(r"\bHTTP (\d{3})\b")


def request_label(status: str, error_message: str | None) -> str:
    """``server error 500``, ``rate limited (429)``, ``HTTP 401``, ``connection refused`` or
    ``connection lost`` when the message says so; else the recorded status."""
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
    if "connection refused" in lowered:
        return "connection refused"
    if "connection lost" in lowered:
        return "connection lost"
    return status


def tool_end_label(stop_reason: str | None, *, denied: bool) -> str:
    if denied:
        return "denied"
    return stop_reason or "completed"
