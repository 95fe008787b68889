"""Session options: compaction and reconnect settings and the session defaults (API.md).

Owns: ``CompactionSettings`` and ``RetryPolicy`` with their defaults and validation, the backoff
ladder arithmetic (R-RETRY-3, R-RETRY-8), the statuses a reconnect retries (R-RETRY-1, defined
in ``_retryable``), the default ``max_turns`` and the workspace check (R-SESSION-1) — one copy
each, for the engine, resume, golden files and the CLI.  Does not: wait, retry or compact.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from projections import DEFAULT_COMPACTION_PROMPT
from projections import markers as mk

from ._retryable import RETRYABLE_STATUSES

__all__ = [
    "DEFAULT_MAX_TURNS",
    "RETRYABLE_STATUSES",
    "CompactionSettings",
    "RetryPolicy",
    "attempt_stamp",
    "check_workspace",
    "exhaustion_reason",
]

DEFAULT_MAX_TURNS: Final = 100
"""R-MAXT-1: turns per task when the caller sets none."""


def check_workspace(workspace: str | os.PathLike[str]) -> Path:
    """R-SESSION-1: ``workspace`` must exist and be a directory; returns it resolved."""
    path = Path(workspace)
    if not path.exists():
        raise FileNotFoundError(f"workspace does not exist: {workspace}")
    if not path.is_dir():
        raise NotADirectoryError(f"workspace is not a directory: {workspace}")
    return path.resolve()


class CompactionSettings(BaseModel):
    """R-COMPACT-1/2.  A threshold ≤ 0 disables its trigger."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_context_length: int = 128000
    max_session_turns: int = -1
    mode: Literal["summarize", "discard"] = "summarize"
    prompt: str = DEFAULT_COMPACTION_PROMPT

    @field_validator("mode", mode="before")
    @classmethod
    def _unknown_mode_is_summarize(cls, value: object) -> object:
        # R-COMPACT-1: an unknown mode reads as summarize.
        return value if value in ("summarize", "discard") else "summarize"

    def threshold(self, context_window: object) -> int:
        """R-COMPACT-2: capped by a declared window of at least 4096 tokens."""
        limit = self.max_context_length
        declared = isinstance(context_window, int) and not isinstance(context_window, bool)
        if declared and context_window >= 4096:  # type: ignore[operator]
            limit = min(limit, context_window - 2048)  # type: ignore[operator]
        return limit


class RetryPolicy(BaseModel):
    """R-RETRY-2/3: at most ``max_reconnects`` retries per turn on an exponential ladder."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_reconnects: int = Field(default=5, ge=0)
    base_ms: int = Field(default=250, ge=0)
    cap_ms: int = Field(default=30000, ge=0)
    compaction_max_reconnects: int | None = Field(default=None, ge=0)
    # The longest the engine waits for the model's next stream item (approvals excluded);
    # None disables it.  A request that goes quiet this long ends as `timeout`.
    request_timeout_ms: int | None = Field(default=None, gt=0)

    def delay_ms(self, retry: int) -> int:
        """The wait before retry ``retry`` (1-based): ``min(base·2^(retry−1), cap)``."""
        if retry < 1:
            raise ValueError("retry numbers start at 1")
        return min(self.base_ms * (1 << (retry - 1)), self.cap_ms)

    @property
    def compaction_budget(self) -> int:
        if self.compaction_max_reconnects is None:
            return self.max_reconnects
        return self.compaction_max_reconnects


def attempt_stamp(status: str, reconnects: int) -> int | None:
    """R-RETRY-7: absent on a clean first-try completion."""
    if status != "completed" or reconnects > 0:
        return reconnects + 1
    return None


def exhaustion_reason(status: str, retries: int, message: str | None) -> str:
    """R-RETRY-10: chosen by the last attempt's status."""
    if status == "malformed":
        return mk.abort_malformed_failed(retries)
    if status == "failed":
        return mk.abort_llm_failed(retries, message)
    return mk.abort_reconnect_failed(retries)
