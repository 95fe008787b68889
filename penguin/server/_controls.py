"""Controls of a running task (R-SRV-5): approvals, abort, steering, retry-now.

Owns: the ``ask`` approval callback (the request is streamed after its call, then waits for
``decide``; one pending approval per call id at a time — a subagent's call may repeat an id;
an abort answers every pending approval ``deny``), and the checks that turn a
control on an idle session into ``409 not_running``.  Does not: start or finish tasks
(``SessionHost``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from engine import Approval, allow_all, deny_all, with_approval_mode
from eventstore import OmniMessage, ToolCallPayload, encode

from ._exceptions import ApiError
from ._hosted import Hosted, Pending

__all__ = ["abort", "approver", "decide", "retry_now", "steer"]

Announce = Callable[[Hosted], None]


def approver(h: Hosted, announce: Announce) -> Callable[[OmniMessage], Any]:
    if h.approval == "allow-all":
        return allow_all
    if h.approval == "deny-all":
        return deny_all

    async def ask(call: OmniMessage) -> Approval:
        if not isinstance(call.payload, ToolCallPayload):
            return "deny"
        await h.wait_published(call)
        pending = Pending(call)
        # Approvals are decided by call id; subagents' calls may repeat one (concurrent
        # children with the same scripted ids): the later waits for the earlier's decision.
        while (earlier := h.pending.get(pending.tool_call_id)) is not None:
            await earlier.done.wait()
            if h.signal is None or h.signal.aborted:
                return "deny"  # aborted meanwhile: nobody will be asked any more
        h.pending[pending.tool_call_id] = pending
        h.server_event(
            "approval_request", tool_call=msgspec.json.decode(encode(call)), origin=call.origin
        )
        announce(h)
        await pending.done.wait()
        return "allow" if pending.decision == "allow" else "deny"

    return with_approval_mode(ask, "ask")  # recorded as the session's setting (R-SET-1)


def decide(h: Hosted, tool_call_id: str, decision: str, announce: Announce) -> None:
    pending = h.pending.pop(tool_call_id, None)
    if pending is None:
        if tool_call_id in h.decided:
            raise ApiError(409, "already_decided", "this approval was already decided")
        raise ApiError(404, "approval_not_found", "no such pending approval")
    pending.decision = decision
    h.decided.add(tool_call_id)
    pending.done.set()
    announce(h)


def abort(h: Hosted) -> bool:
    """Abort the running task or compaction; ``False`` when idle."""
    if h.signal is None:
        return False
    h.signal.abort()
    for pending in h.pending.values():
        pending.decision = "deny"
        pending.done.set()
    h.pending.clear()
    return True


def steer(h: Hosted, messages: Sequence[OmniMessage], announce: Announce) -> None:
    session = h.session
    if h.busy != "task" or session is None or not session.steer(messages):
        raise ApiError(409, "not_running", "no task is running in this session")
    h.queued_steering += 1
    announce(h)


def retry_now(h: Hosted) -> bool:
    session = h.session
    return session is not None and session.skip_reconnect_wait()
