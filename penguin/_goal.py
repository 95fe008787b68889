"""A goal run as its stream shows it (SPEC §18), for the hosts (CLI, server).

Owns: telling a goal round's input from the rest of the stream and counting tokens used as the
engine does (R-GOAL-5: ``total - cache_read`` of every ``token_usage``, subagents' included),
so that a host can announce ``round N (tokens used …)`` in stream order.  Does not: drive rounds
or fold the trace (``projections.GoalState`` does that).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from eventstore import GoalFinishedPayload, OmniMessage, TextPayload, TokenUsagePayload
from projections import GoalState
from projections import markers as mk

__all__ = ["GoalRounds", "goal_dict"]


class GoalRounds:
    """Feed every streamed message; ``round_of`` names a round input, ``tokens`` is the count
    so far (``start`` carries on a continued goal's)."""

    def __init__(self, *, start: int = 0) -> None:
        self.tokens = start
        self.finished: GoalFinishedPayload | None = None

    def round_of(self, msg: OmniMessage) -> tuple[int, bool] | None:
        """``(round, wrap_up)`` when ``msg`` is a round input; counts tokens as it goes."""
        p = msg.payload
        if isinstance(p, TokenUsagePayload):
            self.tokens += GoalState.request_tokens(p.request)
            return None
        if msg.origin is not None:
            return None
        if isinstance(p, GoalFinishedPayload):
            self.finished = p
            return None
        if isinstance(p, TextPayload) and p.role == "user":
            found = mk.goal_round_of(p.text)
            if found is not None:
                block = p.text[: len(p.text) - len(found[1])]
                return found[0], mk.GOAL_WRAPUP_LINE in block
        return None

    def events(self, msg: OmniMessage) -> Iterator[tuple[str, dict[str, Any]]]:
        """The server events a message brings (R-SRV-7): ``goal_round {round, tokens_used}``
        and ``goal_finished {outcome, rounds, tokens_used}``."""
        found = self.round_of(msg)
        if found is not None:
            yield "goal_round", {"round": found[0], "tokens_used": self.tokens}
        p = msg.payload
        if msg.origin is None and isinstance(p, GoalFinishedPayload):
            yield (
                "goal_finished",
                {
                    "outcome": p.outcome,
                    "rounds": p.rounds,
                    "tokens_used": p.tokens_used,
                },
            )


def goal_dict(goal: GoalState) -> dict[str, Any] | None:
    """``GoalState`` as JSON-ready values (``None`` when the session never ran a goal)."""
    if goal.objective is None:
        return None
    return {
        "objective": goal.objective,
        "rounds": goal.rounds,
        "tokens_used": goal.tokens_used,
        "outcome": goal.outcome,
        "continuable": goal.continuable,
    }
