"""Goal mode over HTTP (SPEC R-GOAL-8, R-SRV-4 ``goal?: {budget?}``, R-SRV-7 ``goal_round`` and
``goal_finished`` server events): the shipped goal script through a real uvicorn, with the
built-in tools writing the real goal file."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from serverkit import Reader, is_server, served

from engine.llm import ScriptedLLM

pytestmark = pytest.mark.anyio

SHIPPED = Path(__file__).resolve().parents[3] / "fixtures" / "goal_script.json"
OBJECTIVE = {"input": [{"type": "text", "text": "Write down and verify the plan"}]}


async def test_a_goal_task_streams_rounds_and_its_outcome(tmp_path: Path) -> None:
    async with served(tmp_path, llm_factory=lambda model: ScriptedLLM(SHIPPED)) as s:
        sid = await s.new_session(approval="allow-all")
        # A deadlock guard (a task waiting on an approval nobody gives), not a timing assertion.
        with anyio.fail_after(60):
            async with s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
                rd = Reader(resp)
                await rd.next()  # task_state
                body = {**OBJECTIVE, "goal": {"budget": 50_000}}
                r = await s.post(f"/api/sessions/{sid}/tasks", body)
                assert r.status_code == 202, r.text
                events = await rd.until(is_server("task_state", state="idle"))
        server = [e.json for e in events if e.event == "server"]
        rounds = [e for e in server if e["type"] == "goal_round"]
        assert [e["round"] for e in rounds] == [1, 2]
        assert rounds[0]["tokens_used"] == 0 < rounds[1]["tokens_used"]
        (finished,) = [e for e in server if e["type"] == "goal_finished"]
        assert (finished["outcome"], finished["rounds"]) == ("complete", 2)
        # The goal_finished record itself is on the stream, with its trace position as id.
        messages = [json.loads(e.data) for e in events if e.event is None]
        assert messages[-1]["payload"] == {
            "type": "goal_finished",
            **{k: finished[k] for k in ("outcome", "rounds", "tokens_used")},
        }
        row = (await s.client.get(f"/api/sessions/{sid}")).json()
        assert row["goal"] == {
            "objective": "Write down and verify the plan",
            "rounds": 2,
            "tokens_used": finished["tokens_used"],
            "outcome": "complete",
            "continuable": False,
        }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param({**OBJECTIVE, "goal": {"budget": 0}}, "goal.budget", id="zero-budget"),
        pytest.param(
            {"input": [{"type": "text", "text": "  "}], "goal": {}}, "objective", id="no-text"
        ),
    ],
)
async def test_a_bad_goal_is_refused_before_anything_runs(
    tmp_path: Path, body: dict[str, object], message: str
) -> None:
    async with served(tmp_path, llm_factory=lambda model: ScriptedLLM(SHIPPED)) as s:
        sid = await s.new_session()
        r = await s.post(f"/api/sessions/{sid}/tasks", body)
        assert r.status_code == 400 and message in r.json()["error"]["message"]
        assert (await s.client.get(f"/api/sessions/{sid}")).json()["state"] == "idle"
