"""Owns: calls, approvals and outputs pairing up — one output per completed call of a request
span, after its approval, ids unique (V-7, V-8); only failed repairs inside a compaction span
(V-9); a call of a completed turn left without an output and without an ``abort`` ending its run
(V-10).  Does not: check a call's or an output's own shape.

V-10: a call left without an output is *explained* when the first ``abort`` after it comes before
any run boundary — ``request_begin``, ``compaction_begin``, ``tool_list_ready`` or a user
text/image — the same test R-RESUME-10 uses to choose the case-A placeholder over the crash
placeholder; the end of the file explains it too.  Since "never gets an output in the file" is
only known at the end, the warning is issued at the end of the pass, at the call's line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final

from eventstore import (
    AbortPayload,
    ApprovalDecisionPayload,
    RequestBeginPayload,
    RequestEndPayload,
    ToolCallOutputPayload,
    ToolCallPayload,
)
from projections import markers as mk

from ._core import CheckGroup, FileFacts, Handler

_DENIAL_TEXT: Final = {"deny": mk.DENIED_BY_USER, "forbidden": mk.DENIED_BY_POLICY}


@dataclass(slots=True)
class _Call:
    line: int
    completed: bool
    in_span: bool


class PairingChecks(CheckGroup):
    name = "pairing"

    def __init__(self, facts: FileFacts) -> None:
        super().__init__(facts)
        self.calls: dict[str, _Call] = {}
        # The line of each tool_call id's first call (R-RUN-20, across files too).
        self.call_lines: dict[str, int] = {}
        self.outputs: dict[str, int] = {}
        self.decisions: dict[str, tuple[str, int]] = {}
        # V-10: calls of completed requests still waiting for an output, those of the open
        # request, and those a run boundary passed without an abort.
        self.window: dict[str, int] = {}
        self.span_calls: set[str] = set()
        self.suspects: dict[str, int] = {}

    def run_starts(self) -> None:
        """Calls of completed turns still waiting were not answered by an ``abort``'s case-A
        placeholder (R-RESUME-10)."""
        if not self.window:
            return
        keep: dict[str, int] = {}
        for cid, line in self.window.items():
            if cid in self.span_calls:
                keep[cid] = line
            else:
                self.suspects[cid] = line
        self.window = keep

    def _drop_span_calls(self) -> None:
        for cid in self.span_calls:
            self.window.pop(cid, None)
        self.span_calls = set()

    def _on_request_begin(self, line: int, payload: RequestBeginPayload) -> None:
        if self.facts.req_line is not None:
            self._drop_span_calls()  # that request never committed (R-RESUME-5)
        self.span_calls = set()

    def _on_request_end(self, line: int, payload: RequestEndPayload) -> None:
        if self.facts.req_line is None:
            return
        if payload.status != "completed":
            self._drop_span_calls()
        self.span_calls = set()

    def _on_abort(self, line: int, payload: AbortPayload) -> None:
        self.window.clear()  # the calls still waiting were answered by case-A placeholders

    def _on_call(self, line: int, payload: ToolCallPayload) -> None:
        facts = self.facts
        completed = payload.stop_reason in (None, "completed")
        in_span = facts.req_line is not None
        in_comp = facts.comp_line is not None
        first = self.call_lines.setdefault(payload.tool_call_id, line)
        if first != line:
            # R-RUN-20 (V-8 sees it only when both calls got a decision).
            facts.error(
                line,
                "V-7",
                f"second tool_call with id {payload.tool_call_id} (first at line {first}): "
                "tool_call ids are unique within a session",
            )
        self.calls[payload.tool_call_id] = _Call(line, completed, in_span)
        if completed and in_span and not in_comp:
            self.window[payload.tool_call_id] = line
            self.span_calls.add(payload.tool_call_id)

    def _on_output(self, line: int, payload: ToolCallOutputPayload) -> None:
        facts = self.facts
        cid = payload.tool_call_id
        if payload.output == mk.PLACEHOLDER_CRASH:
            facts.warn(line, "V-15", f"resume placeholder written as the output of {cid}")
        self.window.pop(cid, None)
        self.suspects.pop(cid, None)

        # V-7
        first = self.outputs.get(cid)
        if first is not None:
            facts.error(line, "V-7", f"second output for {cid} (first at line {first})")
            return
        self.outputs[cid] = line
        call = self.calls.get(cid)
        if call is None:
            facts.error(line, "V-7", f"output for {cid}, which no earlier tool_call has")
            return
        if not call.completed:
            facts.error(
                line,
                "V-7",
                f"output for {cid}, whose tool_call (line {call.line}) is not completed",
            )
            return
        if not call.in_span:
            facts.error(
                line,
                "V-7",
                f"output for {cid}, whose tool_call (line {call.line}) is outside a request span",
            )
            return

        if facts.comp_line is not None:
            # V-9: inside a compaction span every output is a repair (R-COMPACT-14).
            if payload.output != mk.COMPACTION_REPAIR or payload.stop_reason != "failed":
                facts.error(
                    line,
                    "V-9",
                    f"output for {cid} inside a compaction span is not the failed repair "
                    f"'{mk.COMPACTION_REPAIR}'",
                )
            return
        # V-8
        decision = self.decisions.get(cid)
        if decision is None:
            facts.error(line, "V-8", f"output for {cid} without an approval_decision")
            return
        expected = _DENIAL_TEXT.get(decision[0])
        if expected is not None and (
            payload.output != expected or payload.stop_reason != "aborted"
        ):
            facts.error(
                line,
                "V-8",
                f"output for {cid} after '{decision[0]}' (line {decision[1]}) is not "
                f"{expected!r} with stop_reason aborted",
            )

    def _on_decision(self, line: int, payload: ApprovalDecisionPayload) -> None:
        facts = self.facts
        cid = payload.tool_call_id
        if facts.comp_line is not None:
            facts.error(line, "V-9", f"approval_decision for {cid} inside a compaction span")
            return
        first = self.decisions.get(cid)
        if first is not None:
            facts.error(
                line, "V-8", f"second approval_decision for {cid} (first at line {first[1]})"
            )
            return
        self.decisions[cid] = (payload.decision, line)
        call = self.calls.get(cid)
        if call is None:
            facts.error(line, "V-8", f"approval_decision for {cid}, which no earlier tool_call has")
        elif not call.completed:
            facts.error(
                line, "V-8", f"approval_decision for {cid}, whose tool_call is not completed"
            )
        elif cid in self.outputs:
            facts.error(
                line,
                "V-8",
                f"approval_decision for {cid} after its output (line {self.outputs[cid]})",
            )

    handlers: ClassVar[dict[type[Any], Handler]] = {
        RequestBeginPayload: _on_request_begin,
        RequestEndPayload: _on_request_end,
        AbortPayload: _on_abort,
        ToolCallPayload: _on_call,
        ToolCallOutputPayload: _on_output,
        ApprovalDecisionPayload: _on_decision,
    }

    def finish(self) -> None:
        for cid, line in self.suspects.items():
            self.facts.warn(
                line,
                "V-10",
                f"tool_call {cid} of a completed turn never gets an output and no abort ends "
                "its run",
            )
