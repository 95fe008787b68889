"""``Session.run(observer=)``: a host sees every message the run yields, in the same order, as
the engine emits it — before ``run()`` yields it (the server publishes there, R-SRV-8)."""

from __future__ import annotations

import pytest
from enginekit import Env, check_trace, collect, make_session

from engine import allow_all
from eventstore import AbortPayload, OmniMessage, RequestEndPayload
from eventstore import builders as b

pytestmark = pytest.mark.anyio

SCRIPT = {
    "responses": [
        [
            {"text": "let me look", "chunks": 3},
            {"tool_call": {"name": "ls", "arguments": {}, "result": {"output": "a b"}}},
        ],
        [{"text": "done"}],
    ],
    "tools": [{"name": "ls", "description": "list"}],
}


async def test_observer_sees_each_message_before_it_is_yielded_in_the_same_order(
    env: Env,
) -> None:
    session, _ = await make_session(env, SCRIPT)
    observed: list[OmniMessage] = []
    seen_first: list[bool] = []

    def on_yield(msg: OmniMessage) -> None:
        seen_first.append(any(m is msg for m in observed))

    async with session:
        yielded = await collect(
            session.run([b.user_text("go")], approve=allow_all, observer=observed.append),
            on=on_yield,
        )
    assert len(yielded) > 10
    assert all(seen_first)
    assert [id(m) for m in observed] == [id(m) for m in yielded]


async def test_observer_still_sees_the_run_when_the_caller_stops_iterating(env: Env) -> None:
    session, _ = await make_session(env, SCRIPT)
    observed: list[OmniMessage] = []
    async with session:
        run = session.run([b.user_text("go")], approve=allow_all, observer=observed.append)
        async for _ in run:
            break
        await run.aclose()  # R-CARRY-2: abandoning the generator aborts the run
    # The caller got one message; the host still saw the run end with its abort.
    assert isinstance(observed[-1].payload, AbortPayload)


async def test_an_observer_that_raises_interrupts_the_run_and_its_error_is_raised(
    env: Env,
) -> None:
    """A raising observer is the caller's bug: it is not taken for a failed model stream (no
    failed ``request_end``, no reconnect); the run is interrupted as an abandoned one is, the
    stream still ends with the ``abort``, and ``run()`` raises the observer's error."""
    session, llm = await make_session(env, SCRIPT)
    calls: list[OmniMessage] = []

    class ObserverBug(Exception):
        pass

    def observer(msg: OmniMessage) -> None:
        calls.append(msg)
        if len(calls) == 4:  # inside the first response's stream
            raise ObserverBug("observer bug")

    yielded: list[OmniMessage] = []
    async with session:
        with pytest.raises(ObserverBug):
            await collect(
                session.run([b.user_text("go")], approve=allow_all, observer=observer),
                on=yielded.append,
            )
        records = check_trace(session, yielded)
        assert not session.broken
        assert len(llm.requests) == 1  # no reconnect
        # The session goes on: the next run answers from the script's next response.
        again = await collect(session.run([b.user_text("go on")], approve=allow_all))
    assert len(calls) == 4  # not called again after it raised
    ends = [r.payload for r in records if isinstance(r.payload, RequestEndPayload)]
    assert [e.status for e in ends] == ["aborted"]
    assert isinstance(yielded[-1].payload, AbortPayload)
    assert any(isinstance(m.payload, RequestEndPayload) for m in again)
