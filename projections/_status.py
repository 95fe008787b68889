"""The one session status (SPEC R-SET-5).

Owns: the status vocabulary and the pure rule that turns a ``SessionState`` (the records), the
lock probe's answer and what a running host knows into one status.  Does not: probe the lock
(``eventstore``; the caller passes ``locked``), read files, or fold records (``SessionState``
tracks how the last run ended and whether one is open).

Every surface — ``penguin sessions`` / ``show``, the server's rows and events, the Web App and
analytics — calls this one function, so a crashed session reads ``interrupted`` everywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal, TypeAlias

if TYPE_CHECKING:
    from ._state import SessionState

__all__ = [
    "ENDED_STATUSES",
    "LIVE_STATUSES",
    "RunEnd",
    "SessionStatus",
    "TaskActivity",
    "session_status",
]

RunEnd: TypeAlias = Literal[
    "completed",
    "max_turns",
    "goal_complete",
    "goal_blocked",
    "budget_limited",
    "aborted",
    "failed",
]
"""How a run ended, read from its last records: a final reply, the max-turns notice, a
``goal_finished``, an ``abort`` by the user, or an ``abort`` the engine wrote (a failure)."""

TaskActivity: TypeAlias = Literal["running", "awaiting_approval", "compacting"]
"""What a host that runs the session knows of it right now."""

SessionStatus: TypeAlias = Literal[
    "running",
    "awaiting_approval",
    "compacting",
    "idle",
    "completed",
    "max_turns",
    "goal_complete",
    "goal_blocked",
    "budget_limited",
    "aborted",
    "failed",
    "interrupted",
]

LIVE_STATUSES: Final[frozenset[str]] = frozenset({"running", "awaiting_approval", "compacting"})
"""Statuses of a session some process is working on."""
ENDED_STATUSES: Final[frozenset[str]] = frozenset(
    {
        "completed",
        "max_turns",
        "goal_complete",
        "goal_blocked",
        "budget_limited",
        "aborted",
        "failed",
        "interrupted",
    }
)


def session_status(
    state: SessionState, *, locked: bool, activity: TaskActivity | None = None
) -> SessionStatus:
    """R-SET-5.  ``activity`` (a host's own knowledge) wins; then a held lock is ``running``
    only while the records show work in progress (a host that holds an idle session loaded is
    not running it); then a run left open without a live lock holder crashed
    (``interrupted``); otherwise the way the last run ended, or ``idle`` when none has."""
    if activity is not None:
        return activity
    if state.run_open:
        if locked:
            return "compacting" if state.open_compaction is not None else "running"
        return "interrupted"
    end = state.run_end
    return "idle" if end is None else end
