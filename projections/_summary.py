"""File summaries: the fold of one closed trace file, merged across files (SPEC R-TRACE-19).

Owns: ``FileSummary`` (one field per session-wide projection), ``FileFold`` (folds one file's
records into it) and ``UsageSummary`` (the session-wide counters of ``Usage``).  Does not: store
summaries (``eventstore``'s sidecar) or decide which files are closed (resume, the engine).

A summary is a pure function of its file's records, so an entry checked against its file alone
is valid whatever happened to the files before it.  To add a projection: give it a summary type
and a merge, add one field to ``FileSummary``, one line in ``FileFold.apply`` and ``summary``
and one in ``FileSummary.merge_into``; the sidecar's schema check then ignores entries written
without it.

``GoalState`` (folded inside ``SessionState``) carries a small control state across files — a
goal round is being counted, a goal exists, and while counting whether a request or compaction
span is open — that decides what a file's records do to it.  Its
summary is therefore one ``GoalEffect`` per value of that control state, found by folding the
file's goal records from two probe states per value that differ in every data field: a field
that comes out different was carried, one that comes out equal was set by the file, and the
token count is either carried plus a delta or set.  That is exact because no data field steers
the fold; only the control state does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import msgspec

from eventstore import (
    HEAD_EVENT_TYPES,
    HOST_EVENT_TYPES,
    PARTIAL_PAYLOAD_TYPES,
    OmniMessage,
    RequestEndPayload,
    SessionMetaPayload,
    TokenCounts,
    TokenUsagePayload,
    ToolCallPayload,
)

from ._goal import GOAL_KINDS, GOAL_STARTS, GoalOutcome, GoalState
from ._state import SessionState, StateSummary
from ._usage import Usage

__all__ = [
    "FileFold",
    "FileSummary",
    "GoalEffect",
    "GoalSummary",
    "UsageSummary",
    "summarize_file",
    "usage_summary",
]

_PARTIALS: frozenset[type[Any]] = frozenset(PARTIAL_PAYLOAD_TYPES)


class UsageSummary(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """The session-wide counters of ``Usage`` (R-USAGE-2) over some files.  ``+`` merges the
    summaries of consecutive files into what ``usage_summary`` gives for their whole fold.

    ``mergeable`` is false for a file that does not start with its ``session_meta``: its first
    records continue the previous file's request span, so only its records can be folded.
    """

    mergeable: bool = True
    requests: int = 0
    errors: int = 0
    compactions_completed: int = 0
    compactions_failed: int = 0
    compactions_aborted: int = 0
    retries: int = 0
    turn_tokens: TokenCounts = msgspec.field(default_factory=TokenCounts)
    compaction_tokens: TokenCounts = msgspec.field(default_factory=TokenCounts)
    # The ``session`` counts of the last ``token_usage`` (``None``: none in these files).
    totals: TokenCounts | None = None

    def __add__(self, later: UsageSummary) -> UsageSummary:
        if not later.mergeable:
            raise ValueError("this file's usage cannot be merged: fold its records")
        return UsageSummary(
            mergeable=self.mergeable,
            requests=self.requests + later.requests,
            errors=self.errors + later.errors,
            compactions_completed=self.compactions_completed + later.compactions_completed,
            compactions_failed=self.compactions_failed + later.compactions_failed,
            compactions_aborted=self.compactions_aborted + later.compactions_aborted,
            retries=self.retries + later.retries,
            turn_tokens=self.turn_tokens + later.turn_tokens,
            compaction_tokens=self.compaction_tokens + later.compaction_tokens,
            totals=later.totals if later.totals is not None else self.totals,
        )


def usage_summary(usage: Usage) -> UsageSummary:
    """``usage``'s counters as a ``UsageSummary``."""
    by_kind = usage.tokens_by_kind()
    return UsageSummary(
        requests=len(usage.rows),
        errors=len(usage.errors),
        compactions_completed=usage.compactions_completed,
        compactions_failed=usage.compactions_failed,
        compactions_aborted=usage.compactions_aborted,
        retries=usage.retries,
        turn_tokens=by_kind["turn"],
        compaction_tokens=by_kind["compaction"],
        totals=usage.totals,
    )


class GoalEffect(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """What one file does to a ``GoalState`` entering it in one control state.  ``None`` (and
    a false ``*_set``) means "carried from before the file"; ``tokens`` is added to the
    carried count unless ``tokens_set``."""

    objective: str | None = None
    rounds: int | None = None
    tokens: int = 0
    tokens_set: bool = False
    outcome: GoalOutcome | None = None
    outcome_set: bool = False
    round_cut: bool | None = None
    counting: bool = False
    in_request: bool | None = None
    in_compaction: bool | None = None


_BIG: Final = 10**15
# The control states a file may be entered in: (counting, has a goal, in a request span, in a
# compaction span).  The request span is tracked only while counting (and reset by a round
# input), so when not counting it is data (carried or set), not control; the compaction span
# is control either way (a round input inside one is a compaction prompt, not a round).
_CONTROLS: Final = [
    *(
        (False, has_goal, None, in_compaction)
        for has_goal in (False, True)
        for in_compaction in (False, True)
    ),
    *(
        (True, has_goal, in_request, in_compaction)
        for has_goal in (False, True)
        for in_request in (False, True)
        for in_compaction in (False, True)
    ),
]


def _control_index(goal: GoalState) -> int:
    has_goal = goal.objective is not None
    if not goal.counting:
        return 2 * has_goal + goal._in_compaction
    return 4 + 4 * has_goal + 2 * goal._in_request + goal._in_compaction


def _probe(control: tuple[bool, bool, bool | None, bool | None], variant: int) -> GoalState:
    counting, has_goal, in_request, in_compaction = control
    goal = GoalState(
        objective=f"\x00probe {variant}" if has_goal else None,
        rounds=-1 - variant,
        tokens_used=variant * _BIG,
        outcome="blocked" if variant else None,
        round_cut=bool(variant),
    )
    goal.counting = counting
    goal._in_request = bool(variant) if in_request is None else in_request
    goal._in_compaction = bool(variant) if in_compaction is None else in_compaction
    return goal


def _same(a: Any, b: Any) -> Any:
    """``a`` when the two probes agree (the file set it), else ``None`` (carried)."""
    return a if a == b else None


def _effect(a: GoalState, b: GoalState) -> GoalEffect:
    return GoalEffect(
        objective=_same(a.objective, b.objective),
        rounds=_same(a.rounds, b.rounds),
        tokens=a.tokens_used,
        tokens_set=b.tokens_used - _BIG != a.tokens_used,
        outcome=a.outcome,
        outcome_set=a.outcome == b.outcome,
        round_cut=_same(a.round_cut, b.round_cut),
        counting=a.counting,
        in_request=_same(a._in_request, b._in_request),
        in_compaction=_same(a._in_compaction, b._in_compaction),
    )


class GoalSummary(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A file's ``GoalEffect`` for each control state it may be entered in (``_CONTROLS``)."""

    effects: list[GoalEffect]

    @classmethod
    def of(cls, payloads: list[tuple[type[Any], Any]]) -> GoalSummary:
        effects = []
        for control in _CONTROLS:
            a, b = _probe(control, 0), _probe(control, 1)
            for goal in (a, b):
                for kind, payload in payloads:
                    # Gated as ``GoalState.apply`` and ``SessionState``'s handlers gate it.
                    if goal.counting or kind in GOAL_STARTS:
                        goal.apply_payload(kind, payload)
            effects.append(_effect(a, b))
        return cls(effects)

    def effect_on(self, goal: GoalState) -> GoalEffect | None:
        index = _control_index(goal)
        return self.effects[index] if index < len(self.effects) else None


def _apply_effect(goal: GoalState, effect: GoalEffect) -> None:
    if effect.objective is not None:
        goal.objective = effect.objective
    if effect.rounds is not None:
        goal.rounds = effect.rounds
    goal.tokens_used = effect.tokens if effect.tokens_set else goal.tokens_used + effect.tokens
    if effect.outcome_set:
        goal.outcome = effect.outcome
    if effect.round_cut is not None:
        goal.round_cut = effect.round_cut
    goal.counting = effect.counting
    if effect.in_request is not None:
        goal._in_request = effect.in_request
    if effect.in_compaction is not None:
        goal._in_compaction = effect.in_compaction


class FileSummary(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """The summary of one closed file's fold, one field per session-wide projection."""

    state: StateSummary
    usage: UsageSummary
    goal: GoalSummary
    # Every tool_call id the file records, in order: not a projection, but what a resumed
    # session's LLM must not hand out again (R-RUN-20) without reading the file.
    call_ids: tuple[str, ...] = ()

    def merge_into(self, state: SessionState) -> bool:
        """Fold this file into ``state`` (its goal included) through the summary: the same
        state as folding the file's records.  ``False``, and ``state`` unchanged, when the
        summary cannot be merged there; the caller then folds the file's records."""
        effect = self.goal.effect_on(state.goal)
        if effect is None or not state._merge_file(self.state):
            return False
        _apply_effect(state.goal, effect)
        return True


class FileFold:
    """Fold one file's records, in order, into its ``FileSummary``."""

    __slots__ = ("_call_ids", "_goal", "_phase", "_state", "_status_set", "_tokens_set", "_usage")

    def __init__(self) -> None:
        self._state = SessionState._for_file_summary()
        self._usage = Usage()
        self._tokens_set = False
        self._status_set = False
        self._goal: list[tuple[type[Any], Any]] = []
        self._call_ids: dict[str, None] = {}
        # 0: nothing yet; 1: the session_meta, then only its rotation head so far; 2: a file
        # whose fold the summary captures; -1: one that does not start that way (not mergeable).
        self._phase = 0

    def apply(self, record: OmniMessage) -> None:
        self._state.apply(record)
        self._usage.apply(record)
        if record.origin is not None:
            return
        kind = type(record.payload)
        if kind in _PARTIALS or kind in HOST_EVENT_TYPES:
            return
        if kind in GOAL_KINDS:
            self._goal.append((kind, record.payload))
        if kind is TokenUsagePayload:
            self._tokens_set = True
        elif kind is RequestEndPayload:
            self._status_set = True
        elif isinstance(record.payload, ToolCallPayload):
            self._call_ids[record.payload.tool_call_id] = None
        phase = self._phase
        if phase == 0:
            self._phase = 1 if kind is SessionMetaPayload else -1
        elif phase == 1 and kind not in HEAD_EVENT_TYPES:
            self._phase = -1 if kind is SessionMetaPayload else 2

    def summary(self) -> FileSummary:
        usage = msgspec.structs.replace(
            usage_summary(self._usage),
            mergeable=self._phase != -1,
            totals=self._usage.totals if self._tokens_set else None,
        )
        return FileSummary(
            state=self._state._summary(
                mergeable=self._phase == 2,
                tokens_set=self._tokens_set,
                status_set=self._status_set,
            ),
            usage=usage,
            goal=GoalSummary.of(self._goal),
            call_ids=tuple(self._call_ids),
        )


def summarize_file(records: Iterable[OmniMessage]) -> FileSummary:
    """The ``FileSummary`` of one file's records."""
    fold = FileFold()
    for record in records:
        fold.apply(record)
    return fold.summary()
