"""Approval rules: allow, ask or deny a tool by name before the approve callback runs (R-MCP-3).

Owns: the rule table (exact tool names and ``*`` globs such as ``fs__*`` for every tool of the
MCP server ``fs``), choosing the rule for a call (an exact name beats a glob, a longer glob beats
a shorter one) and wrapping a run's approve callback with it.  Does not: decide anything the
rules leave open (``ask`` and unmatched calls go to the callback), or record the rules (the
settings record, SPEC §23).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from typing import Final, Literal, TypeAlias

from eventstore import OmniMessage, ToolCallPayload

from ._protocols import Approval, ApproveFn

__all__ = ["ApprovalRule", "ApprovalRules", "apply_rules", "check_rules", "rule_for"]

ApprovalRule: TypeAlias = Literal["allow", "ask", "deny"]
ApprovalRules: TypeAlias = Mapping[str, ApprovalRule]

_RULES: Final = ("allow", "ask", "deny")
_PATTERN: Final = re.compile(r"^[A-Za-z0-9_*-]{1,64}$")


def check_rules(rules: Mapping[str, str]) -> dict[str, ApprovalRule]:
    """``rules`` validated: keys are tool names or ``*`` globs, values allow/ask/deny."""
    checked: dict[str, ApprovalRule] = {}
    for pattern, rule in rules.items():
        if not isinstance(pattern, str) or not _PATTERN.match(pattern):
            raise ValueError(
                f"approval rule {pattern!r}: use a tool name or a glob such as 'fs__*' "
                "(letters, digits, _, - and *)"
            )
        if rule not in _RULES:
            raise ValueError(f"approval rule {pattern!r}: {rule!r} is not one of allow, ask, deny")
        checked[pattern] = rule  # type: ignore[assignment]  # checked just above
    return checked


def rule_for(rules: ApprovalRules, name: str) -> ApprovalRule | None:
    """The rule for tool ``name``: its exact entry, else the most specific matching glob."""
    exact = rules.get(name)
    if exact is not None:
        return exact
    best: tuple[int, str] | None = None
    for pattern, rule in rules.items():
        if "*" in pattern and fnmatch.fnmatchcase(name, pattern):
            specificity = len(pattern.replace("*", ""))
            if best is None or specificity > best[0]:
                best = (specificity, rule)
    return None if best is None else best[1]  # type: ignore[return-value]


def apply_rules(rules: ApprovalRules, approve: ApproveFn | None) -> ApproveFn | None:
    """``approve`` behind ``rules``: ``allow`` allows without asking, ``deny`` refuses by policy
    (``forbidden``: "Tool call denied by policy."), ``ask`` and unmatched calls ask ``approve``
    (none = deny, R-RUN-2)."""
    if not rules:
        return approve

    def decide(call: OmniMessage) -> Approval | object:
        payload = call.payload
        rule = rule_for(rules, payload.name) if isinstance(payload, ToolCallPayload) else None
        if rule == "allow":
            return "allow"
        if rule == "deny":
            return "forbidden"
        if approve is None:
            return "deny"
        return approve(call)

    return decide  # type: ignore[return-value]  # the callback's own awaitable passes through
