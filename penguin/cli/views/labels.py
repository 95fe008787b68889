"""Words for what happened, as a user reads them (issue 15 item 18, issue 30 item 5).

Owns: the label of a tool call's end (``denied`` rather than the ``aborted`` stop reason a
denial records) and of the sandbox a session's tools run under (SPEC R-BOX-3).  A request's
label (``server error 500``, ``connection refused`` instead of the recorded ``timeout``) is
``replay.request_label``, shared with the exports.  Does not: change what is recorded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from replay import request_label

if TYPE_CHECKING:
    from engine import SandboxPolicy

__all__ = ["request_label", "sandbox_label", "tool_end_label"]


def tool_end_label(stop_reason: str | None, *, denied: bool) -> str:
    if denied:
        return "denied"
    return stop_reason or "completed"


def sandbox_label(policy: SandboxPolicy | None) -> tuple[str, str]:
    """``(text, style)`` for a session header: the mode and the network, or a loud warning when
    the tools run unconfined (R-BOX-3: ``off`` is always shown)."""
    if policy is None:
        return "tools: the environment's own (no sandbox)", "yellow"
    if policy.mode == "off":
        net = "" if policy.network else ", network off"
        return f"sandbox OFF: tools run unconfined{net}", "bold red"
    return policy.describe(), "dim"
