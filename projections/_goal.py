"""The ``GoalState`` projection (SPEC R-GOAL-7).

Owns: the latest goal run of a session folded from its records — objective, rounds run, tokens
used, outcome, and whether the latest round was cut off (an ``abort`` or the max-turns notice)
— incrementally, O(1) per record.  Does not: read ``GOAL.yaml`` or decide the next round (the
engine's goal driver does), or see a subagent's usage before the goal's ``goal_finished``
records the total (origin-tagged messages are never written to the parent trace, R-SUB-2).

How the trace marks a goal: every round's input is one user text starting with a goal block
(``[goal]\\nround: <N>\\n…[/goal]``).  Round 1 starts a new goal; a later round continues the
current one (a continuation after an abort or a crash, R-GOAL-7).  Tokens are counted from a
round input until the goal's ``goal_finished`` or until a user text that starts a task of its
own (a plain run between an interrupted goal and its continuation is not the goal's cost).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from eventstore import (
    AbortPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    GoalFinishedPayload,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    TextPayload,
    TokenCounts,
    TokenUsagePayload,
)

from .markers import goal_round_of, is_context_summary, is_steering

__all__ = ["GOAL_KINDS", "GOAL_STARTS", "GoalOutcome", "GoalState"]

GoalOutcome: TypeAlias = Literal["complete", "blocked", "budget_limited", "aborted"]


@dataclass(slots=True)
class GoalState:
    """The latest goal of a session (R-GOAL-7).  ``from_records`` is repeated ``apply``.

    ``objective`` is ``None`` when the session never ran a goal; ``outcome`` is ``None`` while
    the goal is unfinished (running, or cut short by a crash).  ``round_cut`` is true when the
    latest round ended with an ``abort`` record or the max-turns notice (R-GOAL-4).
    """

    objective: str | None = None
    rounds: int = 0
    tokens_used: int = 0
    outcome: GoalOutcome | None = None
    round_cut: bool = False

    # --- fold scratch (not part of equality) ---------------------------------------------
    # Between a round input and the goal's end: the goal's records (not part of equality).
    counting: bool = field(default=False, init=False, repr=False, compare=False)
    _in_request: bool = field(default=False, init=False, repr=False, compare=False)
    # Inside a compaction span the compaction prompt is a recorded user text (R-COMPACT-8).
    _in_compaction: bool = field(default=False, init=False, repr=False, compare=False)

    @classmethod
    def from_records(cls, records: Iterable[OmniMessage]) -> GoalState:
        state = cls()
        for record in records:
            state.apply(record)
        return state

    @property
    def continuable(self) -> bool:
        """A goal ``session.run(None, goal=GoalOptions(resume=True))`` can continue: one whose
        last ``goal_finished`` is ``aborted`` or missing (R-GOAL-7)."""
        return self.objective is not None and self.outcome in (None, "aborted")

    def apply(self, record: OmniMessage) -> None:
        """Fold one more record.  Origin-tagged messages belong to other sessions."""
        if record.origin is not None:
            return
        payload = record.payload
        kind = type(payload)
        if self.counting:
            if kind in GOAL_KINDS:
                self.apply_payload(kind, payload)
        elif kind in GOAL_STARTS:
            self.apply_payload(kind, payload)

    @staticmethod
    def request_tokens(counts: TokenCounts) -> int:
        """What one request costs a goal's budget (R-GOAL-5): ``total - cache_read``, never
        negative.  The one spelling: the engine's subagent tally and the CLI's round view
        use it too."""
        return max(0, counts.total - counts.cache_read)

    def apply_payload(self, kind: type[Any], payload: Any) -> None:
        """Fold a payload of this session's record.  Only payloads of ``GOAL_KINDS`` while
        ``counting``, else only of ``GOAL_STARTS``, can change anything: ``SessionState``
        checks that first (the fold is on its hot path), as ``apply`` does."""
        if kind is TokenUsagePayload:
            if self.counting:
                self.tokens_used += GoalState.request_tokens(payload.request)
        elif kind is RequestBeginPayload:
            self._in_request = True
        elif kind is RequestEndPayload:
            self._in_request = False
        elif kind is TextPayload:
            self._on_text(payload)
        elif kind is CompactionBeginPayload:
            self._in_compaction = True
        elif kind is CompactionEndPayload:
            self._in_compaction = False
        elif kind is AbortPayload:
            if self.counting:
                self.round_cut = True
        elif kind is GoalFinishedPayload:
            self.outcome = payload.outcome
            self.rounds = payload.rounds
            self.tokens_used = payload.tokens_used
            self.counting = False

    def _on_text(self, payload: TextPayload) -> None:
        if payload.role == "assistant":
            # Outside any request span the engine writes only the max-turns notice (R-MAXT-2).
            if (
                self.counting
                and not self._in_request
                and payload.stop_reason not in (None, "completed")
            ):
                self.round_cut = True
            return
        if payload.role != "user" or self._in_compaction:
            return
        text = payload.text
        found = goal_round_of(text) if text.startswith("[goal]") else None
        if found is None:
            if not (is_steering(text) or is_context_summary(text)):
                self.counting = False
            return
        round_no, body = found
        # Spans are tracked only while counting; a round input is never written inside one.
        self._in_request = False
        self._in_compaction = False
        if round_no == 1 or self.objective is None:
            self.objective = body
            self.tokens_used = 0
        self.rounds = round_no
        self.outcome = None
        self.round_cut = False
        self.counting = True


GOAL_STARTS: frozenset[type[Any]] = frozenset({TextPayload, GoalFinishedPayload})
GOAL_KINDS: frozenset[type[Any]] = frozenset(
    {
        TokenUsagePayload,
        RequestBeginPayload,
        RequestEndPayload,
        TextPayload,
        AbortPayload,
        CompactionBeginPayload,
        CompactionEndPayload,
        GoalFinishedPayload,
    }
)
