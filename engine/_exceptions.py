"""The engine's exceptions, raised only at the API edge (inside the loop errors are values).

Owns: the tree below.  Does not: decide stop reasons (those are ``StopReason`` values).

    EngineError                 root
    ├── SessionBusy             a run or compaction is already active (R-RUN-1, R-CONC-2)
    └── SessionBroken           a trace write failed; resume the session from its trace
                                (R-TRACE-15)
"""

from __future__ import annotations

__all__ = ["EngineError", "SessionBroken", "SessionBusy"]


class EngineError(Exception):
    """Root of the engine's exceptions."""


class SessionBusy(EngineError):
    """A second ``run()`` or ``compact()`` while one is active."""

    def __init__(self, *, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id} is busy: a run or compaction is active")


class SessionBroken(EngineError):
    """The session's trace could not be written; it refuses runs until resumed."""

    def __init__(self, *, session_id: str, cause: str) -> None:
        self.session_id = session_id
        self.cause = cause
        super().__init__(
            f"session {session_id} is broken ({cause}); resume it from its trace to continue"
        )
