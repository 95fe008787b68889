"""The engine's exceptions, raised only at the API edge (inside the loop errors are values).

Owns: the tree below.  Does not: decide stop reasons (those are ``StopReason`` values).

    EngineError                 root
    ├── SessionBusy             a run or compaction is already active (R-RUN-1, R-CONC-2)
    ├── SessionBroken           a trace write failed; resume the session from its trace
    │                           (R-TRACE-15)
    └── SandboxUnavailable      the kernel cannot enforce the sandbox a session asks for
                                (R-BOX-2): it does not start
"""

from __future__ import annotations

from typing import Any

__all__ = ["EngineError", "SandboxUnavailable", "SessionBroken", "SessionBusy"]


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


class SandboxUnavailable(EngineError):
    """The kernel does not offer what a sandbox mode needs (R-BOX-2); ``policy`` is the
    ``SandboxPolicy`` asked for.  Nothing runs unconfined instead."""

    def __init__(self, message: str, *, policy: Any) -> None:
        self.policy = policy
        super().__init__(message)
