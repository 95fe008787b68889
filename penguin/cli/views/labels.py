"""Words for what happened, as a user reads them (issue 15 item 18, issue 30 item 5).

Owns: the label of a tool call's end (``denied`` rather than the ``aborted`` stop reason a
denial records).  A request's label (``server error 500``, ``connection refused`` instead of
the recorded ``timeout``) is ``replay.request_label``, shared with the exports.  Does not:
change what is recorded.
"""

from __future__ import annotations

from replay import request_label

__all__ = ["request_label", "tool_end_label"]


def tool_end_label(stop_reason: str | None, *, denied: bool) -> str:
    if denied:
        return "denied"
    return stop_reason or "completed"
