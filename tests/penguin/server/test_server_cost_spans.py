"""The sessions list (first prompt, most recent activity first, estimated cost), the usage
aggregates priced from the price table, and the span tree route with subagents nested
(R-WEB-1, R-SRV-10, R-WEB-4, R-SUB-3), over a real uvicorn on 127.0.0.1."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from serverkit import Reader, is_server, scripted, served

from eventstore import DataRoot
from projections import Price

pytestmark = pytest.mark.anyio

FIXTURES = Path(__file__).parents[3] / "fixtures" / "traces"
_NAME = re.compile(r"(session-[\w-]+?)_(\d+)\.jsonl")


async def _run(s: object, sid: str, text: str) -> None:
    async with s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:  # type: ignore[attr-defined]
        rd = Reader(resp)
        await rd.next()
        body = {"input": [{"type": "text", "text": text}]}
        r = await s.post(f"/api/sessions/{sid}/tasks", body)  # type: ignore[attr-defined]
        assert r.status_code == 202, r.text
        await rd.until(is_server("task_state", state="idle"))


async def test_sessions_list_first_prompt_recent_first_and_cost(tmp_path: Path) -> None:
    llm = scripted([{"text": "a"}])
    prices = {"script": Price(input=3.0, output=15.0)}
    async with served(tmp_path, llm_factory=llm, approval="allow-all", prices=prices) as s:
        first = await s.new_session()
        second = await s.new_session()
        await _run(s, first, "Summarise the notes")
        rows = (await s.client.get("/api/sessions")).json()["sessions"]
        # The session used last comes first, whatever the creation order.
        assert [r["id"] for r in rows] == [first, second]
        assert rows[0]["first_prompt"] == "Summarise the notes"
        tokens = rows[0]["tokens"]
        assert tokens > 0 and rows[0]["unpriced_tokens"] == 0
        assert rows[0]["cost"] == pytest.approx(rows[0]["cost"]) and rows[0]["cost"] > 0
        assert rows[1]["cost"] is None
        usage = (await s.client.get("/api/usage?group_by=day")).json()
        assert usage["currency"] == "USD"
        (day,) = usage["rows"]
        assert day["cost"] == pytest.approx(rows[0]["cost"])
        assert day["unpriced_tokens"] == 0
        by_model = (await s.client.get("/api/usage?group_by=model")).json()["rows"]
        assert [(r["key"], r["cost"] is not None) for r in by_model] == [("script", True)]
        doc = (await s.client.get("/api/openapi.json")).json()
        usage_op = doc["paths"]["/api/usage"]["get"]["responses"]["200"]
        assert usage_op["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/UsageOut"
        }
        assert "cost" in doc["components"]["schemas"]["UsageRowOut"]["properties"]


async def test_span_tree_nests_concurrent_subagents_under_their_calls(tmp_path: Path) -> None:
    root = DataRoot(tmp_path)
    for f in sorted((FIXTURES / "subagents_concurrent").rglob("*.jsonl")):
        m = _NAME.fullmatch(f.name)
        assert m is not None
        dest = root.trace_path(m.group(1), int(m.group(2)), date="2026-12-02")
        root.ensure_dir(dest.parent)
        dest.write_bytes(f.read_bytes())
    parent = "session-2026-12-02-04-17-57-993f0ae9"
    async with served(tmp_path, prices={"script": Price(input=1.0, output=1.0)}) as s:
        r = await s.client.get(f"/api/sessions/{parent}/spans")
        assert r.status_code == 200, r.text
        data = r.json()
        assert data["session"] == parent and data["model"] == "script"
        (run,) = data["spans"]
        assert run["kind"] == "run" and run["status"] == "completed"
        assert run["latency_ms"] is not None and run["latency_ms"] > 0
        calls = [
            c for turn in run["children"] for c in turn["children"] if c["kind"] == "tool_call"
        ]
        assert [c["name"] for c in calls] == ["run_subagent", "run_subagent"]
        children = set()
        for call in calls:
            # The child's own run hangs under the call that started it, in the child session.
            (child_run,) = call["children"]
            assert child_run["kind"] == "run" and child_run["session"] == call["subagent"]
            assert call["tokens"] == child_run["tokens"]
            children.add(call["subagent"])
        assert len(children) == 2
        # The run's tokens include the subagents' (the priced total too).
        own = sum(t["tokens"]["total"] for t in run["children"] if t["kind"] == "turn")
        assert run["tokens"]["total"] == own
        assert run["cost"] == pytest.approx(run["tokens"]["total"] / 1e6)
        assert (await s.client.get("/api/sessions/session-nope/spans")).status_code == 404


async def test_an_unloaded_sessions_row_shows_its_recorded_sandbox_r_set_2(tmp_path: Path) -> None:
    """After a restart, a session not loaded yet reads the sandbox its settings record states
    (the conversation header showed "no sandbox" before)."""
    from eventstore import SettingsPayload, encode
    from eventstore import builders as b

    sid = "session-2026-12-02-08-00-00-5a4db0c1"
    root = DataRoot(tmp_path)
    path = root.trace_path(sid, 1, date="2026-12-02")
    root.ensure_dir(path.parent)
    records = [
        b.session_meta(
            session_id=sid,
            provider="scripted",
            model_id="script",
            model_context_window="unknown",
            system_prompt="",
            agent_state=str(tmp_path / "a"),
            workspace=str(tmp_path),
        ),
        b.settings(SettingsPayload(sandbox="read-only", network=False)),
        b.user_text("hi"),
    ]
    path.write_bytes(b"".join(encode(r) + b"\n" for r in records))
    async with served(tmp_path) as s:
        row = (await s.client.get(f"/api/sessions/{sid}")).json()
        assert row["sandbox"] == {"mode": "read-only", "network": False}
        listed = (await s.client.get("/api/sessions")).json()["sessions"]
        assert listed[0]["first_prompt"] == "hi" and listed[0]["subagent"] is False
