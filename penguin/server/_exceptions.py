"""The server's exception root.

Owns: ``ServerError`` and ``ApiError`` (an error a client sees, with its HTTP status and code).
Does not: render responses (``_errors`` does).
"""

from __future__ import annotations

__all__ = ["ApiError", "ServerError"]


class ServerError(Exception):
    """Root of every exception ``penguin.server`` raises."""


class ApiError(ServerError):
    """An error answered to the client as ``{"error": {"code", "message"}}`` (R-SRV-2)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
