"""200 seeded abort moments over a task with concurrent tools (issue: the loop under
interruption).  Every trace validates, live state equals the rebuilt state, and the next request
pairs every completed tool_call with exactly one output (INV-12, R-CARRY-3/4)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from enginekit import assert_requests_paired, check_trace, make_env, make_session

from engine import AbortSignal, RetryPolicy, allow_all
from eventstore import OmniMessage
from eventstore import builders as b

pytestmark = pytest.mark.anyio

COUNT = 2000 if os.environ.get("PENGUIN_EXTENDED") else 200
TOOLS = [{"name": "t", "description": "test tool"}]


def _script(rng: random.Random) -> dict[str, object]:
    responses: list[object] = []
    for turn in range(3):
        items: list[object] = [{"thinking": "plan", "chunks": 2}, {"text": "working", "chunks": 3}]
        for n in range(rng.randint(1, 3)):
            result: dict[str, object] = {"output": f"r{turn}_{n}", "delay_ms": rng.randint(0, 3)}
            if rng.random() < 0.5:
                result["chunks"] = [f"r{turn}", f"_{n}"]
            if rng.random() < 0.1:
                result = {"output": "boom", "status": "failed"}
            items.append(
                {
                    "tool_call": {
                        "name": "t",
                        "arguments": {"n": n},
                        "id": f"c{turn}_{n}",
                        "result": result,
                    }
                }
            )
        if turn == 1 and rng.random() < 0.5:
            responses.append([{"text": "flaky"}, {"fail": {"status": "timeout", "message": "t"}}])
        responses.append(items)
    responses.append([{"text": "done"}])
    responses.extend([[{"text": "after"}]] * 3)
    return {"responses": responses, "tools": TOOLS}


@pytest.mark.parametrize("seed", range(COUNT))
async def test_random_abort_moment(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    env = make_env(tmp_path)
    session, llm = await make_session(env, _script(rng), retry=RetryPolicy(base_ms=1, cap_ms=1))
    signal = AbortSignal()
    stop_after = rng.randint(1, 60)
    seen = 0
    async with session:
        stream: list[OmniMessage] = []
        async for msg in session.run([b.user_text("go")], approve=allow_all, signal=signal):
            stream.append(msg)
            seen += 1
            if seen == stop_after:
                signal.abort()
        check_trace(session, stream)
        async for _ in session.run([b.user_text("continue")], approve=allow_all):
            pass
        check_trace(session)
    assert_requests_paired(llm.requests)
